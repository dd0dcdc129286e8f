from __future__ import annotations

import re

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


def _spellings(branch: str) -> list[str]:
    """Every text a branch of a category pattern matches at its shortest: each optional
    character present or absent, a group ``(x)?`` present or absent, ``\\b`` and ``^`` dropped.
    Only those constructs occur in the branches of the prefiltered patterns (checked here)."""
    assert re.fullmatch(r"(\\b|\^)?([a-z0-9_:]\??|\([a-z]+\)\?)*", branch), branch
    branch = branch.removeprefix("\\b").removeprefix("^")
    out = [""]
    i = 0
    while i < len(branch):
        if branch[i] == "(":
            j = branch.index(")?", i)
            group = branch[i + 1:j]
            out = [s + g for s in out for g in ("", group)]
            i = j + 2
        elif i + 1 < len(branch) and branch[i + 1] == "?":
            out = [s + g for s in out for g in ("", branch[i])]
            i += 2
        else:
            out = [s + branch[i] for s in out]
            i += 1
    return out


@pytest.mark.parametrize("category", sorted(cl.CATEGORY_LITERALS))
def test_category_literals_are_in_every_match(category: str) -> None:
    pattern = dict(cl.KERNEL_CATEGORIES)[category]
    literals = cl.CATEGORY_LITERALS[category]
    for branch in pattern.split("|"):
        for text in _spellings(branch):
            assert re.search(pattern, text), (branch, text)  # the expansion is a match
            assert any(lit in text for lit in literals), (category, branch, text)


def test_prefiltered_categories_equal_the_patterns_alone() -> None:
    from tracekit import RESNET_NW0, SAMPLED

    from trainpace.trace.load import load_trace

    names = {"void foo_mha_kernel", "xmha", "all_to_all", "reduce-scatter", "cudnn::cnn::x"}
    for path in (RESNET_NW0, *SAMPLED):
        names |= set(load_trace(path).names)

    def plain(name: str) -> str:  # the classification without the literals
        low = name.lower()
        match = cl._OWN_NAME.match(low)
        own = match.group(1) if match else low
        for text in (own, low):
            for category, source in cl.KERNEL_CATEGORIES:
                if re.search(source, text):
                    return category
        return "other"

    assert len(names) > 500
    assert [cl.kernel_category(n) for n in sorted(names)] == [plain(n) for n in sorted(names)]


# Names that probe the edges of the rules: line breaks (where a regex's ``.`` and ``$`` stop),
# non-ASCII digits (``\d``), prefixes and near misses.
EDGE_NAMES = [
    "", "nccl", "ncclKernel", "nccl\nKernel", "ncclX\nKernel", "xncclKernel", "nccl_Kernel_x",
    "Memcpy", "x Memcpy y", "a\nMemcpy", "Memset", "aMemset", "dma", "dmaX", "Sync", "x\nSync",
    "Event Sync", "Context Sync", "Sync\n",
    "ProfilerStep#3", "ProfilerStep#3\n", "ProfilerStep#3\n\n", "x ProfilerStep#12",
    "ProfilerStep#", "ProfilerStep#a", "ProfilerStep#\u0663", "ProfilerStep", "ProfilerStep#1 x",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__\n",
    "enumerate(DataLoader)#_X.__next__y", "enumerate(DataLoader)#\n.__next__",
    "enumerate(DataPipe)#", " enumerate(DataPipe)#", "enumerate(DataLoader)#.__iter__",
    "cudaMemcpy", "cudaMemcpy\n", "cudaMemcpyAsync", " cudaMemcpy", "aten::item",
    "aten::_local_scalar_dense", "cudaDeviceSynchronize", "cudaStreamSynchronize\n\n",
    "Optimizer.step#SGD.step", "Optimizer.zero_grad#Adam.zero_grad", "optimizer.step#SGD",
    "Optimizer.step", "nccl:all_reduce", "gloo:broadcast", "nccl:all_reduce ",
]


def _trace_names() -> list[str]:
    from tracekit import HANDMADE, RESNET_NW0, SAMPLED

    from trainpace.trace.load import load_trace

    names = set(EDGE_NAMES)
    for path in (RESNET_NW0, *SAMPLED, HANDMADE):
        names |= set(load_trace(path).names)
    return sorted(names)


def test_hta_kernel_type_equals_htas_patterns() -> None:
    def by_regex(name: str) -> str:  # HTA's get_kernel_type, its patterns as HTA runs them
        for kind, pattern, negate in cl.HTA_KERNEL_TYPES:
            if (re.match(pattern, name) is None) == negate:
                return kind
        return cl.HTA_OTHER

    names = _trace_names()
    assert len(names) > 500
    assert [cl.hta_kernel_type(n) for n in names] == [by_regex(n) for n in names]
    assert {by_regex(n) for n in names} == set(cl.HTA_TYPES)  # every branch was taken


def test_name_flags_equal_the_patterns() -> None:
    expected = {
        "dataloader": lambda n: cl.DATALOADER.search(n) is not None,
        "comm_op": lambda n: n in cl.COMM_OPS,
        "sync_event": lambda n: n in cl.HTA_SYNC_EVENTS,
        # the rule as first written: one regex for the whole name
        "synchronize": lambda n: re.search(
            r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize"
            r"|cuStreamSynchronize|cuCtxSynchronize|cudaMemcpy|hipDeviceSynchronize"
            r"|hipStreamSynchronize|aten::item|aten::_local_scalar_dense)$", n) is not None,
        "optimizer": lambda n: re.search(r"^Optimizer\.(step|zero_grad)#", n) is not None,
        "step_named": lambda n: cl.PROFILER_STEP.search(n) is not None,
        "step_span": lambda n: re.search(r"^ProfilerStep#(\d+)$", n) is not None,
        "hta_step_name": lambda n: re.search("ProfilerStep", n) is not None,
    }
    assert tuple(expected) == cl.NAME_FLAGS
    names = _trace_names()
    flags = cl.name_flags(names)
    assert flags.shape == (len(cl.NAME_FLAGS), len(names))
    for row, (flag, rule) in enumerate(expected.items()):
        want = [rule(n) for n in names]
        assert flags[row].tolist() == want, flag
        assert any(want), flag  # each rule is exercised by a name it accepts
    assert cl.name_flags([]).shape == (len(cl.NAME_FLAGS), 0)
