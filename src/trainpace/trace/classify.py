"""What each trace event is: the classification rules, as data.

Two kernel classifications live here, on purpose:

- :data:`HTA_KERNEL_TYPES`: Holistic Trace Analysis 0.5.0's exact rules (``hta/utils/utils.py``:
  ``is_comm_kernel``, ``is_memory_kernel``, ``is_compute_kernel``), used only for the temporal
  breakdown and the communication/computation overlap so those figures compare with HTA's.
- :data:`KERNEL_CATEGORIES`: trainpace's own finer categories for the kernel breakdown.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from itertools import compress, count, repeat
from typing import Any

import numpy as np

from trainpace.trace.substrings import occurrences

# ---- event categories (the trace's ``cat``, compared lower-cased) -----------------------

# Work that runs on the device: kernels and copies ("Kernel"/"Memcpy"/"Memset" in traces
# written before PyTorch 1.9, "kernel"/"gpu_memcpy"/"gpu_memset" after).
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset",
                         "mtia_ccp_events"})
KERNEL_CATS = frozenset({"kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "memset"})
# Host-side calls into the device runtime or driver (the launches).
RUNTIME_CATS = frozenset({"runtime", "cuda_runtime", "cuda_driver", "mtia_runtime",
                          "xpu_runtime", "privateuse1_runtime", "glow_runtime"})
# Host-side operators and annotations (torch-tb-profiler's "CPU Exec" role).
CPU_OP_CATS = frozenset({"cpu_op", "operator", "user_annotation", "python"})
PYTHON_CATS = frozenset({"python_function"})
# Operators proper (ATen ops, autograd nodes), not the annotations that wrap Python code.
OPERATOR_CATS = frozenset({"cpu_op", "operator"})
# Spans that are neither host work nor device work: the profiler's own span, GPU-side copies
# of annotations, flow arrows.
IGNORED_CATS = frozenset({"trace", "gpu_user_annotation", "ac2g", "async", "fwdbwd"})

# ---- names ------------------------------------------------------------------------------

PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")
# torch-tb-profiler's DataLoader role: the loader's __next__ (or a DataPipe) under
# torch.profiler, which names it "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__".
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*\.__next__$|^enumerate\(DataPipe\)#")
# torch-tb-profiler's communication ops (NcclOpNameSet, GlooOpNameSet).
COMM_OPS = frozenset(
    f"{lib}:{op}"
    for lib in ("nccl", "gloo")
    for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
)
# Host calls that wait for the device (whole names; a trailing line break is tolerated, as
# the regex ``^(...)$`` these were first written as tolerated it).
SYNCHRONIZE = frozenset(
    f"{call}{end}"
    for call in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                 "cuStreamSynchronize", "cuCtxSynchronize", "cudaMemcpy", "hipDeviceSynchronize",
                 "hipStreamSynchronize", "aten::item", "aten::_local_scalar_dense")
    for end in ("", "\n")
)
OPTIMIZER = ("Optimizer.step#", "Optimizer.zero_grad#")  # name prefixes
# HTA keeps these GPU-side sync events on stream -1 as device events.
HTA_SYNC_EVENTS = frozenset({"Event Sync", "Context Sync"})

# ---- HTA 0.5.0 kernel types (temporal breakdown, overlap) -----------------------------------

HTA_COMMUNICATION = "COMMUNICATION"
HTA_MEMORY = "MEMORY"
HTA_COMPUTATION = "COMPUTATION"
HTA_OTHER = "OTHER"
# (type, pattern matched at the start of the name, negate), first hit wins: HTA's rules as
# HTA writes them. :func:`hta_kernel_type` applies them with str methods (no regex to compile
# or run); tests/trace/test_classify.py checks that both agree.
HTA_KERNEL_TYPES: tuple[tuple[str, str, bool], ...] = (
    (HTA_COMMUNICATION, r"^nccl.*Kernel", False),
    (HTA_MEMORY, r"(^Memcpy)|(^Memset)|(^dma)", False),
    (HTA_COMPUTATION, r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)", True),
)
HTA_TYPES: tuple[str, ...] = (HTA_COMMUNICATION, HTA_MEMORY, HTA_COMPUTATION, HTA_OTHER)


def hta_kernel_type(name: str) -> str:
    """HTA 0.5.0's ``get_kernel_type``: COMMUNICATION, MEMORY, COMPUTATION or OTHER."""
    line = name.partition("\n")[0]  # where the patterns' ``.*`` can reach
    if line.startswith("nccl") and "Kernel" in line[4:]:
        return HTA_COMMUNICATION
    if name.startswith(("Memcpy", "Memset", "dma")):
        return HTA_MEMORY
    # not COMPUTATION: nccl...Kernel (excluded above), Memcpy anywhere in the first line, a
    # Memset prefix (excluded above), Sync anywhere in the first line
    if "Memcpy" in line or "Sync" in line:
        return HTA_OTHER
    return HTA_COMPUTATION


# ---- trainpace kernel categories -------------------------------------------------------

# (category, substrings, prefixes, word starts), first hit wins. A text is of a category when
# it contains one of its substrings, starts with one of its prefixes, or has a word (after a
# character that is not a letter, digit or _) starting with one of its word starts. The text is
# the lower-cased name: first its own part (before its template and argument lists, so
# "elementwise_kernel<..fbgemm..>" is not a GEMM) and, when that finds nothing, the whole name
# ("cutlass::Kernel<..s1688gemm..>"). Plain substrings, not regexes: every name of a trace is
# classified at once (:mod:`.substrings`), where a regex costs tens of µs a name.
KERNEL_CATEGORIES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    ("communication", ("nccl", "rccl", "hccl", "allreduce", "all_reduce", "allgather",
                       "all_gather", "reducescatter", "reduce_scatter", "alltoall", "all_toall",
                       "allto_all", "all_to_all", "sendrecv", "nvshmem", "dpsk::ep"), (), ()),
    ("memory", (), ("memcpy", "hipmemcpy", "memset", "hipmemset", "dma"), ()),
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa", "xformers", "cutlassf",
                   "cutlassb"), (), ("mha",)),
    ("convolution", ("conv", "scudnn", "cudnn::cnn", "cudnn::detail", "winograd", "dgrad",
                     "wgrad", "fprop", "implicit_gemm", "cask_cudnn", "fft2d", "nchwtonhwc",
                     "nhwctonchw"), (), ()),
    ("gemm", ("gemm", "gemv", "cublas", "matmul", "nvjet", "splitk", "wmma", "bmm",
              "triton_tem_fused_mm", "triton_tem_fused_addmm"), (), ()),
    ("reduction", ("reduce", "reduction", "norm", "bn_fw", "bn_bw", "softmax", "welford",
                   "argmax", "argmin", "topk", "sort", "scan", "cub::", "pool", "triton_red_",
                   "triton_per_", "cross_entropy", "nll_loss"), (), ()),
    ("elementwise", ("elementwise", "pointwise", "triton_poi_", "fill", "copy", "cat", "index",
                     "gather", "scatter", "where", "add", "mul", "div", "relu", "gelu", "silu",
                     "sigmoid", "tanh", "dropout", "foreach", "multi_tensor", "adam", "sgd",
                     "adagrad", "clamp", "threshold", "cast", "convert", "permute",
                     "transpose", "embedding", "unary", "binary"), (), ()),
)
CATEGORIES: tuple[str, ...] = (*(c for c, *_ in KERNEL_CATEGORIES), "other")
_OTHER = len(KERNEL_CATEGORIES)
_OWN_NAME = re.compile(r"^(?:void\s+)?([^<(]*)")
# The substrings and word starts of all categories, for :func:`kernel_categories`: each one's
# category (its rank) and whether it must start a word.
_LITERALS: tuple[str, ...] = tuple(
    lit for _, subs, _, words in KERNEL_CATEGORIES for lit in (*subs, *words))
_LITERAL_RANK = np.array([rank for rank, (_, subs, _, words) in enumerate(KERNEL_CATEGORIES)
                          for _ in (*subs, *words)], dtype=np.int64)
_LITERAL_LEN = np.array([len(lit) for lit in _LITERALS], dtype=np.int64)
_LITERAL_WORD = np.array([w for _, subs, _, words in KERNEL_CATEGORIES
                          for w in (*(False for _ in subs), *(True for _ in words))], dtype=bool)


def _word_start(text: str, start: int) -> bool:
    """Whether ``start`` begins a word in ``text`` (regex ``\\b`` before a letter)."""
    if start == 0:
        return True
    before = text[start - 1]
    return not (before.isalnum() or before == "_")


def _has_word(text: str, word: str) -> bool:
    at = text.find(word)
    while at >= 0:
        if _word_start(text, at):
            return True
        at = text.find(word, at + 1)
    return False


def _rank(text: str) -> int:
    """The category of one lower-cased text, as its rank in :data:`KERNEL_CATEGORIES`."""
    for rank, (_, subs, prefixes, words) in enumerate(KERNEL_CATEGORIES):
        if (text.startswith(prefixes) or any(map(text.__contains__, subs))
                or any(_has_word(text, w) for w in words)):
            return rank
    return _OTHER


def kernel_category(name: str) -> str:
    """The category of a device kernel or copy, by its name."""
    low = name.lower()
    match = _OWN_NAME.match(low)
    own = match.group(1) if match else low
    rank = _rank(own) if own else _OTHER
    if rank == _OTHER and own != low:
        rank = _rank(low)
    return CATEGORIES[rank]


def _ranks(texts: list[str]) -> np.ndarray:
    """:func:`_rank` of each text (all ASCII), at once: every occurrence of every substring
    and word start found in one pass (:mod:`.substrings`), the best rank kept per text."""
    best = np.full(len(texts), _OTHER, dtype=np.int64)
    text, lit, start = occurrences(texts, _LITERALS)
    ok = np.ones(len(lit), dtype=bool)
    word = np.flatnonzero(_LITERAL_WORD[lit])  # few: checked one by one
    ok[word] = [_word_start(texts[t], s) for t, s in zip(text[word].tolist(),
                                                         start[word].tolist(), strict=True)]
    np.minimum.at(best, text[ok], _LITERAL_RANK[lit[ok]])
    for rank, (_, _, prefixes, _) in enumerate(KERNEL_CATEGORIES):
        if prefixes:
            hit = _having(texts, str.startswith, prefixes)
            best[hit] = np.minimum(best[hit], rank)
    return best


def kernel_categories(names: Sequence[str]) -> list[str]:
    """:func:`kernel_category` of each name: the ASCII ones at once."""
    fast = [i for i, name in enumerate(names) if name.isascii()]
    lows = [names[i].lower() for i in fast]
    owns = [m.group(1) if (m := _OWN_NAME.match(low)) else low for low in lows]
    rank = _ranks(owns)
    again = [j for j in np.flatnonzero(rank == _OTHER).tolist() if owns[j] != lows[j]]
    if again:
        rank[again] = _ranks([lows[j] for j in again])
    if len(fast) == len(names):
        return [CATEGORIES[r] for r in rank.tolist()]
    out = [kernel_category(name) for name in names]  # the few that are not ASCII
    for i, r in zip(fast, rank.tolist(), strict=True):
        out[i] = CATEGORIES[r]
    return out


# ---- per-symbol lookup tables --------------------------------------------------------------


def name_in(symbols: Sequence[str], members: frozenset[str]) -> np.ndarray:
    """For each symbol, is it one of ``members``."""
    return np.fromiter(map(members.__contains__, symbols), dtype=bool, count=len(symbols))


def _having(symbols: Sequence[str], test: Callable[[str, Any], bool], arg: Any) -> list[int]:
    """The indices of the symbols ``s`` with ``test(s, arg)``, found in C (``map`` over a str
    method): a few hundred names cost microseconds, where a regex per name costs a
    millisecond."""
    return list(compress(count(), map(test, symbols, repeat(arg))))


# What :func:`name_flags` tells of each name, in its rows' order.
NAME_FLAGS: tuple[str, ...] = (
    "dataloader",  # DATALOADER
    "comm_op",  # one of COMM_OPS
    "sync_event",  # one of HTA_SYNC_EVENTS
    "synchronize",  # one of SYNCHRONIZE
    "optimizer",  # starts with one of OPTIMIZER
    "step_named",  # ends with ProfilerStep#N (PROFILER_STEP.search)
    "step_span",  # is ProfilerStep#N (PROFILER_STEP.match)
    "hta_step_name",  # contains ProfilerStep (HTA's test for a step)
)


# Names that are flags by their whole text: the flag rows they set (see NAME_FLAGS).
_WHOLE_NAMES: dict[str, int] = {}
for _row, _members in ((1, COMM_OPS), (2, HTA_SYNC_EVENTS), (3, SYNCHRONIZE)):
    for _name in _members:
        _WHOLE_NAMES[_name] = _WHOLE_NAMES.get(_name, 0) | (1 << _row)


def _holding(joined: str, literal: str, starts: list[int]) -> list[int]:
    """The indices of the names (``joined`` with NULs, each one's start in ``starts``) that
    hold ``literal``: one search through all of them in C, then one lookup per hit."""
    out: list[int] = []
    at = joined.find(literal)
    while at >= 0:
        i = bisect.bisect_right(starts, at) - 1
        if not out or out[-1] != i:
            out.append(i)
        at = joined.find(literal, at + 1)
    return out


def name_flags(names: Sequence[str]) -> np.ndarray:
    """For each name, the :data:`NAME_FLAGS`: a bool array of shape (flags, names).

    The names are searched all at once for the literal part of each rule (a NUL stands
    between two names, so ``"\\0enumerate(Data"`` finds the names that start so); a regex
    runs only on the few names found.
    """
    n = len(names)
    out = np.zeros((len(NAME_FLAGS), n), dtype=bool)
    if n == 0:
        return out
    whole = np.fromiter(map(_WHOLE_NAMES.get, names, repeat(0)), dtype=np.int64, count=n)
    for row in (1, 2, 3):
        np.not_equal(whole & (1 << row), 0, out=out[row])
    joined = "\x00" + "\x00".join(names)  # NUL before each name
    if joined.count("\x00") != n:  # a name holds a NUL: the names cannot be told apart
        _flags_one_by_one(names, out)
        return out
    starts = np.cumsum(np.fromiter(map(len, names), dtype=np.int64, count=n) + 1).tolist()
    starts = [0, *starts[:-1]]  # each name's NUL
    for i in _holding(joined, "\x00enumerate(Data", starts):
        out[0, i] = DATALOADER.search(names[i]) is not None
    for i in _holding(joined, "\x00Optimizer.", starts):
        out[4, i] = names[i].startswith(OPTIMIZER)
    for i in _holding(joined, "ProfilerStep", starts):
        out[5, i] = PROFILER_STEP.search(names[i]) is not None
        out[6, i] = PROFILER_STEP.match(names[i]) is not None
        out[7, i] = True
    return out


def _flags_one_by_one(names: Sequence[str], out: np.ndarray) -> None:
    """Rows 0 and 4-7 of :func:`name_flags`, name by name."""
    n = len(names)
    for i in _having(names, str.startswith, "enumerate(Data"):
        out[0, i] = DATALOADER.search(names[i]) is not None
    out[4] = np.fromiter(map(str.startswith, names, repeat(OPTIMIZER)), dtype=bool, count=n)
    for i in _having(names, str.__contains__, "ProfilerStep"):
        out[5, i] = PROFILER_STEP.search(names[i]) is not None
        out[6, i] = PROFILER_STEP.match(names[i]) is not None
        out[7, i] = True
