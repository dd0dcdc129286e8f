from __future__ import annotations

import random
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
    assert cl.kernel_categories([name]) == [category]
    assert category in cl.CATEGORIES


def test_dataloader_names() -> None:
    assert cl.DATALOADER.search("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert cl.DATALOADER.search("enumerate(DataPipe)#ShardingFilterIterDataPipe")
    assert not cl.DATALOADER.search("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__iter__")


# The categories as first written, as regexes (searched in the lower-cased text): the
# substrings of classify.KERNEL_CATEGORIES must classify every name exactly as these did.
REGEX_CATEGORIES = (
    ("communication", r"nccl|rccl|hccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
                      r"|sendrecv|nvshmem|dpsk::ep"),
    ("memory", r"^(hip)?memcpy|^(hip)?memset|^dma"),
    ("attention", r"flash|fmha|attention|attn|sdpa|xformers|cutlassf|cutlassb|\bmha"),
    ("convolution", r"conv|scudnn|cudnn::cnn|cudnn::detail|winograd|dgrad|wgrad|fprop"
                    r"|implicit_gemm|cask_cudnn|fft2d|nchwtonhwc|nhwctonchw"),
    ("gemm", r"gemm|gemv|cublas|matmul|nvjet|splitk|wmma|bmm|triton_tem_fused_(add)?mm"),
    ("reduction", r"reduce|reduction|norm|bn_fw|bn_bw|softmax|welford|argmax|argmin|topk"
                  r"|sort|scan|cub::|pool|triton_red_|triton_per_|cross_entropy|nll_loss"),
    ("elementwise", r"elementwise|pointwise|triton_poi_|fill|copy|cat|index|gather|scatter"
                    r"|where|add|mul|div|relu|gelu|silu|sigmoid|tanh|dropout|foreach"
                    r"|multi_tensor|adam|sgd|adagrad|clamp|threshold|cast|convert|permute"
                    r"|transpose|embedding|unary|binary"),
)


def by_regexes(name: str) -> str:
    low = name.lower()
    match = re.match(r"^(?:void\s+)?([^<(]*)", low)
    own = match.group(1) if match else low
    for text in (own, low):
        for category, pattern in REGEX_CATEGORIES:
            if re.search(pattern, text):
                return category
    return "other"


def test_categories_are_the_regexes_categories() -> None:
    assert tuple(c for c, _ in REGEX_CATEGORIES) == cl.CATEGORIES[:-1]


def _generated_names(count: int, seed: int = 7) -> list[str]:
    """Names made of pieces of the substrings (whole, cut, upper-cased), the characters that
    end a name's own part, word boundaries, line breaks, NUL and non-ASCII letters."""
    rng = random.Random(seed)
    literals = [lit for _, subs, prefixes, words in cl.KERNEL_CATEGORIES
                for lit in (*subs, *prefixes, *words)]
    pieces = ["<", "(", " ", "::", "_", ",", ">", ")", "void ", "VOID\t", "void", "x", "9",
              "\n", "\x00", "é", "ß", "İ", "K", "Kernel", "hip", "mha", "fmha", "amha", "_mha"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.random()
            if kind < 0.45:
                lit = rng.choice(literals)
                if rng.random() < 0.3:  # cut: a near miss
                    lit = lit[: rng.randint(1, len(lit))] if rng.random() < 0.5 \
                        else lit[rng.randint(0, len(lit) - 1):]
                parts.append(lit.upper() if rng.random() < 0.2 else lit)
            else:
                parts.append(rng.choice(pieces))
        out.append("".join(parts))
    return out


def test_kernel_categories_equal_the_regexes() -> None:
    from tracekit import RESNET_NW0, SAMPLED

    from trainpace.trace.load import load_trace

    names = {"void foo_mha_kernel", "xmha", "all_to_all", "reduce-scatter", "cudnn::cnn::x",
             "void memcpy_kernel", "void  dma_x<int>", "hipMemset", "x(memcpy)", "mha<x>",
             "voidmha", "void\tmha", "void\u3000mha", "ßmha", "é_mha", ""}
    for path in (RESNET_NW0, *SAMPLED):
        names |= set(load_trace(path).names)
    names |= set(_generated_names(4000))
    ordered = sorted(names)
    want = [by_regexes(n) for n in ordered]
    assert [cl.kernel_category(n) for n in ordered] == want
    assert cl.kernel_categories(ordered) == want
    assert set(want) == set(cl.CATEGORIES)  # every category is reached
    assert any(not n.isascii() for n in ordered)  # and the one-by-one path too
    assert cl.kernel_categories([]) == []


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
    # with a NUL inside a name, the names are searched one by one
    with_nul = [*names, "a\x00ProfilerStep#1", "x\x00enumerate(DataPipe)#", "\x00Optimizer.step#"]
    for some in (names, with_nul):
        flags = cl.name_flags(some)
        assert flags.shape == (len(cl.NAME_FLAGS), len(some))
        for row, (flag, rule) in enumerate(expected.items()):
            want = [rule(n) for n in some]
            assert flags[row].tolist() == want, flag
            assert any(want), flag  # each rule is exercised by a name it accepts
    assert cl.name_flags([]).shape == (len(cl.NAME_FLAGS), 0)
