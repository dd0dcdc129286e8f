from __future__ import annotations

import pytest

from trainpace.trace import classify as cl


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "COMMUNICATION"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "COMMUNICATION"),
        ("Memcpy HtoD (Pageable -> Device)", "MEMORY"),
        ("Memset (Device)", "MEMORY"),
        ("volta_sgemm_128x64_nn", "COMPUTATION"),
        # HTA 0.5 quirks kept on purpose: a name with Memcpy inside or ending in Sync is
        # neither memory nor computation.
        ("void at::native::Memcpy_kernel", "OTHER"),
        ("Context Sync", "OTHER"),
        ("nccl_something_else", "COMPUTATION"),
    ],
)
def test_hta_kernel_types(name: str, kind: str) -> None:
    assert cl.hta_kernel_type(name) == kind


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long)", "communication"),
        ("Memcpy DtoD (Device -> Device)", "memory"),
        ("flash_fwd_kernel", "attention"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)", "convolution"),
        ("void implicit_convolve_sgemm<float, float, 1024, 6, 7>(int, int)", "convolution"),
        ("volta_scudnn_128x128_stridedB_splitK_small_nn_v1", "convolution"),
        ("volta_sgemm_64x64_nt", "gemm"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1>(Params)", "gemm"),
        ("triton_tem_fused_mm_0", "gemm"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct)", "reduction"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(float)", "reduction"),
        ("triton_red_fused_sum_1", "reduction"),
        # the template mentions fbgemm, the kernel itself is elementwise
        ("void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_hfp8_gpu(at::Tensor const&)>", "elementwise"),
        ("triton_poi_fused_add_0", "elementwise"),
        ("some_custom_kernel", "other"),
    ],
)
def test_kernel_categories(name: str, category: str) -> None:
    assert cl.kernel_category(name) == category
    assert category in cl.CATEGORIES


def test_dataloader_names() -> None:
    assert cl.DATALOADER.search("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert cl.DATALOADER.search("enumerate(DataPipe)#ShardingFilterIterDataPipe")
    assert not cl.DATALOADER.search("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__iter__")
