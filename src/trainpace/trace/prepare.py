"""One rank's events, classified once: masks, launch links, profiler steps, HTA's filter.

Everything here is a per-event array computed with a per-symbol lookup (a regex runs once
per distinct name, never once per event).
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainpace.trace import classify as cl
from trainpace.trace import intervals as iv
from trainpace.trace.arrays import among, distinct
from trainpace.trace.load import TraceColumns


class Steps(msgspec.Struct, frozen=True):  # built in C: no import-time cost
    """The ``ProfilerStep#N`` spans on the host, sorted by start."""

    names: tuple[str, ...]
    numbers: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


class Prepared(msgspec.Struct, frozen=True):  # built in C: no import-time cost
    """Classified events of one trace (all arrays are per event)."""

    cols: TraceColumns
    device: np.ndarray  # kernels, copies, memsets: work on the device
    kernel: np.ndarray
    memcpy: np.ndarray
    memset: np.ndarray
    runtime: np.ndarray  # host calls into the device runtime (launches, syncs)
    cpu_op: np.ndarray  # host operators and annotations
    python: np.ndarray
    host: np.ndarray  # any host-side span (not device work, not the profiler's own)
    dataloader: np.ndarray
    comm_op: np.ndarray  # host nccl:/gloo: collective ops
    operator: np.ndarray  # operators proper (classify.OPERATOR_CATS), not annotations
    synchronize: np.ndarray  # named as a call that waits for the device (any category)
    optimizer: np.ndarray  # named Optimizer.step#/zero_grad# (any category)
    step_named: np.ndarray  # named ...ProfilerStep#N (classify.PROFILER_STEP.search)
    step_span: np.ndarray  # named ProfilerStep#N (PROFILER_STEP.match), any category
    hta_type: np.ndarray  # index into classify.HTA_TYPES, by name (device events; else OTHER)
    launch: np.ndarray  # for device events: index of the host event of the same correlation
    hta_kept: np.ndarray  # HTA's filter: events of every ProfilerStep but the last
    hta_filtered: bool  # whether that filter applied (two or more ProfilerStep names)
    steps: Steps
    by_start: np.ndarray  # the events' indices in order of start (stable: ties by index)


def spans(p: Prepared, mask: np.ndarray) -> iv.IntervalSet:
    """The union of the spans of the events in ``mask``: ``iv.union(ts[mask], end[mask])``,
    with the events taken in start order (sorted once, in :func:`prepare`) instead of sorted
    again. The same arrays either way; a few events are sorted, cheaper than the lookup."""
    c = p.cols
    if np.count_nonzero(mask) * 16 < len(mask):
        return iv.union(c.ts[mask], c.end[mask])
    idx = p.by_start[mask[p.by_start]]
    return iv.union_sorted(c.ts[idx], c.end[idx])


# Masks by category (the trace's ``cat``, lower-cased), in the order of _per_symbol's rows.
_CAT_MASKS: tuple[tuple[str, frozenset[str]], ...] = (
    ("device", cl.DEVICE_CATS), ("kernel", cl.KERNEL_CATS), ("memcpy", cl.MEMCPY_CATS),
    ("memset", cl.MEMSET_CATS), ("runtime", cl.RUNTIME_CATS), ("cpu_op", cl.CPU_OP_CATS),
    ("python", cl.PYTHON_CATS), ("ignored", cl.IGNORED_CATS), ("operator", cl.OPERATOR_CATS),
)


def _per_symbol(cols: TraceColumns) -> dict[str, np.ndarray]:
    """Per-event masks, each looked up from a table per symbol: one table per kind of symbol
    (categories, names), indexed once by the events (its rows are contiguous arrays)."""
    low = [c.lower() for c in cols.cats]
    cats = np.zeros((len(_CAT_MASKS), len(low)), dtype=bool)
    for row, (_, members) in enumerate(_CAT_MASKS):
        cats[row] = cl.name_in(low, members)
    out = dict(zip((k for k, _ in _CAT_MASKS), cats[:, cols.cat], strict=True))
    out.update(zip(cl.NAME_FLAGS, cl.name_flags(cols.names)[:, cols.name], strict=True))
    return out


def _hta_types(cols: TraceColumns, device: np.ndarray) -> np.ndarray:
    """HTA's kernel type of each event, classified by name for the names of ``device``
    events only (the others, host events, are never read by type: OTHER)."""
    lookup = np.full(len(cols.names), cl.HTA_TYPES.index(cl.HTA_OTHER), dtype=np.int8)
    used = distinct(cols.name[device])
    kind = {k: i for i, k in enumerate(cl.HTA_TYPES)}
    names = cols.names
    lookup[used] = [kind[cl.hta_kernel_type(names[i])] for i in used.tolist()]
    out: np.ndarray = lookup[cols.name]
    return out


def _link(source: np.ndarray, target: np.ndarray, key: np.ndarray) -> np.ndarray:
    """For each event in ``source``: the first event in ``target`` with the same key, or -1."""
    out = np.full(len(key), -1, dtype=np.int64)
    candidates = np.flatnonzero(target & (key != -1))
    wanted = np.flatnonzero(source & (key != -1))
    if len(candidates) == 0 or len(wanted) == 0:
        return out
    order = candidates[np.argsort(key[candidates], kind="stable")]
    sorted_keys = key[order]
    at = np.searchsorted(sorted_keys, key[wanted])
    at_safe = np.minimum(at, len(order) - 1)
    hit = sorted_keys[at_safe] == key[wanted]
    out[wanted[hit]] = order[at_safe[hit]]
    return out


def _steps(cols: TraceColumns, host_step: np.ndarray) -> Steps:
    idx = np.flatnonzero(host_step)
    idx = idx[np.argsort(cols.ts[idx], kind="stable")]
    names = tuple(cols.names[i] for i in cols.name[idx])
    numbers = np.array([int(m.group(1)) if (m := cl.PROFILER_STEP.search(n)) else -1
                        for n in names], dtype=np.int64)
    return Steps(names=names, numbers=numbers, start=cols.ts[idx], end=cols.end[idx])


def prepare(cols: TraceColumns) -> Prepared:
    """Classify the events of one trace."""
    m = _per_symbol(cols)
    host = ~m["device"] & ~m["ignored"]
    # HTA's GPUKernelFilter: on a stream with a correlation, or a GPU-side sync event.
    hta_gpu = ((cols.stream >= 0) & (cols.correlation >= 0)) | m["sync_event"]
    launch = _link(m["device"] | hta_gpu, ~hta_gpu, cols.correlation)
    steps = _steps(cols, m["step_span"] & m["cpu_op"])
    kept, filtered = _hta_filter(cols, hta_gpu, m["hta_step_name"])
    return Prepared(
        cols=cols, device=m["device"], kernel=m["kernel"], memcpy=m["memcpy"],
        memset=m["memset"], runtime=m["runtime"], cpu_op=m["cpu_op"], python=m["python"],
        host=host, dataloader=m["dataloader"] & m["cpu_op"], comm_op=m["comm_op"] & m["cpu_op"],
        operator=m["operator"], synchronize=m["synchronize"], optimizer=m["optimizer"],
        step_named=m["step_named"], step_span=m["step_span"],
        hta_type=_hta_types(cols, m["device"] | hta_gpu), launch=launch, hta_kept=kept,
        hta_filtered=filtered, steps=steps, by_start=np.argsort(cols.ts, kind="stable"),
    )


def _hta_filter(cols: TraceColumns, hta_gpu: np.ndarray,
                step_name: np.ndarray) -> tuple[np.ndarray, bool]:
    """HTA's ``_filter_irrelevant_gpu_kernels``: with two or more distinct ProfilerStep names,
    keep the host events that start before the last step and the device events they launched.
    """
    host_steps = step_name & ~hta_gpu
    if len(distinct(cols.name[step_name])) < 2 or not host_steps.any():
        return np.ones(len(cols), dtype=bool), False
    last_start = cols.ts[host_steps].max()
    host_kept = ~hta_gpu & (cols.ts < last_start)
    kept_correlations = distinct(cols.correlation[host_kept])
    device_kept = hta_gpu & among(cols.correlation, kept_correlations)
    return host_kept | device_kept, True
