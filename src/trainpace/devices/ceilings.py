"""Measured ceilings: the memory bandwidth and matmul rates this machine really reaches.

The spec table knows data-center GPUs; it knows no CPU, and a card's sustained rate can sit
below its sheet (power caps, clocks). ``trainpace ceilings`` measures both figures here:

- bandwidth: a large tensor copy (bytes read + bytes written, so 2 x the buffer), buffers
  far larger than any cache;
- matmul: square matrix products per dtype, 2·n³ FLOPs each.

Each runs a warm-up, then repeats in batches (each batch long enough for the clock), and
keeps the best batch: a ceiling is what the machine can do, not what it usually does. Around
the measurement, the machine's busy CPU time less this process's says what other processes
took: a CPU ceiling measured while they took more than a quarter of a core is provisional
(cached, labelled, never used as the machine's peak; see :mod:`trainpace.devices.cache`). The
result is cached per device (the CPU's thread count is part of a CPU's identity; see
:mod:`trainpace.devices.cache`); the meter reads the cache where the spec table has no
entry, and on a run where neither knows a peak, :func:`ensure_ceilings` measures a quick
one after the loop, once.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainpace.devices._timing import best_seconds, copy_gb_s, matmul_runner, matmul_size
from trainpace.devices.cache import (
    QUIET_OTHERS_CORES,
    SCHEMA,
    Ceilings,
    Stored,
    cache_dir,
    cache_path,
    load_cached,
    save_ceilings,
    store_ceilings,
    with_exceeded,
)
from trainpace.devices.specs import canonical_dtype, table_peaks
from trainpace.errors import ConfigError, DeviceError

__all__ = [
    "CPU_DTYPES", "CUDA_DTYPES", "SCHEMA", "Ceilings", "FirstRun", "Stored", "cache_dir",
    "cache_path", "cpu_name", "cpu_seconds", "device_identity", "ensure_ceilings", "load_ceilings",
    "measure_ceilings", "save_ceilings", "store_ceilings",
]

CPU_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
CUDA_DTYPES: tuple[str, ...] = ("float32", "tf32", "bfloat16", "float16", "float8")


def cpu_name() -> str:
    """The CPU model name (``/proc/cpuinfo`` on Linux), else what :mod:`platform` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_seconds() -> tuple[float, float]:
    """(the machine's busy CPU seconds, all cores; this process's CPU seconds, all threads)."""
    import psutil

    t = psutil.cpu_times()
    busy = sum(float(getattr(t, f, 0.0)) for f in ("user", "nice", "system", "irq", "softirq",
                                                   "steal"))
    own = os.times()
    return busy, own.user + own.system


def device_identity(device: str | torch.device) -> tuple[str, str, int | None]:
    """(kind, name, threads) of a device; raises :class:`DeviceError` if it cannot be used."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:  # torch's message lists every device type
        raise DeviceError(f"{device}: not a device name; use cpu, cuda or cuda:N") from exc
    if dev.type == "cpu":
        return "cpu", cpu_name(), torch.get_num_threads()
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{device}: no CUDA device is visible to PyTorch; run on a GPU machine "
                "or pass --device cpu"
            )
        index: int | None = dev.index  # None for plain "cuda" (torch types it int)
        return "cuda", torch.cuda.get_device_name(index), None
    raise DeviceError(f"{device}: ceilings are measured on cpu or cuda devices only")


def load_ceilings(device: str | torch.device,
                  env: Mapping[str, str] | None = None) -> Ceilings | None:
    """The cached ceilings of ``device``, or None if none were measured (or unreadable)."""
    try:
        kind, name, threads = device_identity(device)
    except DeviceError:
        return None
    return load_cached(kind, name, threads, env)


def measure_ceilings(
    device: str | torch.device = "cpu",
    *,
    dtypes: Sequence[str] | None = None,
    quick: bool = False,
    copy_mib: int | None = None,
    matmul_n: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    budget_s: float | None = None,
    load: Callable[[], tuple[float, float]] = cpu_seconds,
) -> Ceilings:
    """Measure the bandwidth and matmul ceilings of ``device`` (see the module docstring).

    A CPU is measured with the torch threads the process has (``torch.get_num_threads()``),
    recorded as ``threads`` in the result; the cache keeps one entry per thread count. The
    caller who wants another count sets it (``trainpace ceilings --threads N`` does, in the
    CLI): a library call never changes it. ``budget_s``: the timing budget of each figure
    (default 0.2 s quick, 1 s full).

    ``quick`` uses small sizes and short budgets (a second or two on a CPU): good enough to
    check that it works, less exact. ``dtypes`` defaults to every dtype the device kind
    supports; a dtype the device cannot run is listed in ``skipped`` with the reason.
    ``load``: (machine busy CPU s, own CPU s) — read before and after, it says what other
    processes took meanwhile (``method.others_cpu_cores``, ``method.quiet``).
    """
    kind, name, threads = device_identity(device)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    defaults = CPU_DTYPES if kind == "cpu" else CUDA_DTYPES
    wanted = [canonical_dtype(d) for d in (dtypes or defaults)]
    if kind == "cpu" and "tf32" in wanted:
        raise ConfigError("dtype", "tf32", "must not be tf32 on a CPU (a CUDA tensor-core mode)")
    if kind == "cpu":
        copy_mib = copy_mib or (64 if quick else 512)
        # quick still times products of ~50 ms (the probe picks n ≤ this): a 256² product
        # takes ~1 ms, where thread wake-ups on a busy machine decide the figure, not the ALUs
        matmul_n = matmul_n or (1024 if quick else 2048)
    else:
        copy_mib = copy_mib or (256 if quick else 2048)
        matmul_n = matmul_n or (2048 if quick else 8192)
    budget_s = budget_s if budget_s is not None else (0.2 if quick else 1.0)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    started, (busy_before, own_before) = clock(), load()
    bandwidth = copy_gb_s(dev, copy_mib, sync, budget_s=budget_s, clock=clock)

    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    skipped: dict[str, str] = {}
    previous_precision = torch.get_float32_matmul_precision()
    try:
        for dtype in wanted:
            torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
            try:
                n = matmul_size(dtype, matmul_n, dev, sync, clock)
                run = matmul_runner(dtype, n, dev)
            except (DeviceError, RuntimeError, TypeError) as exc:
                skipped[dtype] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                continue
            seconds = best_seconds(run, sync, budget_s=budget_s, clock=clock)
            rates[dtype] = 2 * n**3 / seconds / 1e12
            sizes[dtype] = n
    finally:
        torch.set_float32_matmul_precision(previous_precision)
    wall_s = max(clock() - started, 1e-9)
    busy_after, own_after = load()
    others_cores = max(0.0, (busy_after - busy_before) - (own_after - own_before)) / wall_s
    # a GPU's copy and products do not share the CPU's cores: only a CPU's figures are judged
    quiet = kind != "cpu" or others_cores < QUIET_OTHERS_CORES

    return Ceilings(
        kind=kind,
        name=name,
        threads=threads,
        bandwidth_gb_s=bandwidth,
        matmul_tflops=rates,
        skipped=skipped,
        measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        torch_version=torch.__version__,
        method={
            "bandwidth": f"copy of {copy_mib} MiB float32, bytes read + written, best batch",
            "matmul": "n x n @ n x n, 2·n³ FLOPs, best batch",
            "matmul_n": sizes,
            "quick": quick,
            "others_cpu_cores": round(others_cores, 3),
            "quiet": quiet,
        },
    )


@dataclass(frozen=True)
class FirstRun:
    """What :func:`ensure_ceilings` did: the Meter puts :meth:`to_dict` in meta.json."""

    # "table", "cached", "measured", "provisional", "rejected", "skipped" or "failed"
    status: str
    note: str
    seconds: float = 0.0
    path: str | None = None
    ceilings: Ceilings | None = None
    warnings: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        """A quick ceiling was measured and cached now: the peaks must be read again."""
        return self.status == "measured"

    @property
    def peaks_changed(self) -> bool:
        """The cache may hold other figures than the run read at its start (measured now, or
        written by another run meanwhile): the peaks must be read again."""
        return self.status in ("measured", "cached", "provisional")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "note": self.note, "seconds": self.seconds,
                "path": self.path, "warnings": list(self.warnings),
                "ceilings": self.ceilings.to_dict() if self.ceilings is not None else None}


def ensure_ceilings(
    device: str | torch.device = "cpu",
    *,
    threads: int | None = None,
    dtype: str | None = None,
    budget_s: float = 2.0,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    measure: Callable[..., Ceilings] | None = None,
    achieved: Mapping[str, float] | None = None,
) -> FirstRun:
    """Make sure a peak is known for ``device`` at ``threads``: the spec table's, the cached
    ceilings', or a quick ceiling measured now (once; then cached). Never raises.

    Call it once after the training loop (never during it: it keeps the device busy for up
    to ``budget_s``). ``threads``: the run's torch thread count (default: the process's
    now). A CPU is measured with the threads the process has (never set here); when they are
    no longer the run's, a ceiling measured now would not be the run's, so none is (status
    ``skipped``, the note says how to measure it).
    ``dtype``: the dtype whose matmul peak the run needs (default float32). ``achieved``:
    the run's figures (``{"bandwidth": GB/s, "matmul float32": TFLOP/s}``); a cached ceiling
    below one of them is wrong: it is marked provisional and measured again. A provisional
    cached ceiling (a loaded machine's) is measured again too, until a quiet one replaces it.
    """
    started = clock()
    try:
        dtype_key = canonical_dtype(dtype or "float32")
        kind, name, threads_now = device_identity(device)
        if kind == "cpu" and threads is not None and threads != threads_now:
            return FirstRun(
                "skipped", f"{name}: the run had {threads} torch thread"
                f"{'s' if threads > 1 else ''}, the process now has {threads_now}: no "
                f"ceiling measured for the run's; `trainpace ceilings --threads {threads}` "
                "measures it")
        if table_peaks(name).tflops:
            return FirstRun("table", f"{name}: peaks from the spec table")
        path = cache_path(kind, name, threads_now, env)
        cached = load_cached(kind, name, threads_now, env)
        exceeded = with_exceeded(cached, achieved or {}) if cached is not None else None
        if exceeded is not None:
            save_ceilings(exceeded, env)  # never used again as the machine's peak
            cached = exceeded
        if (cached is not None and cached.quiet and dtype_key in cached.matmul_tflops
                and cached.bandwidth_gb_s):
            return FirstRun("cached", f"{name}: measured ceilings from {path}", path=str(path),
                            ceilings=cached)
        if kind != "cpu" and torch.device(device).type != "cuda":
            return FirstRun("skipped", f"{name}: ceilings are measured on cpu or cuda only")
        # a third of the budget per figure: the copy, the size probe and the product
        per_figure = max(0.05, budget_s / 6)
        run = measure or measure_ceilings
        measured = run(device, dtypes=[dtype_key], quick=True, budget_s=per_figure)
        measured = with_exceeded(measured, achieved or {}) or measured
        stored = store_ceilings(measured, env)
        seconds = clock() - started
        where = f"{name}" + (f", {threads_now} thread{'s' if threads_now > 1 else ''}"
                             if threads_now else "")
        if not stored.saved or stored.rejected:
            return FirstRun("rejected", f"a quick ceiling of {where} was measured "
                            f"({seconds:.1f} s) but not kept: " + "; ".join(stored.warnings),
                            seconds, str(stored.path), stored.ceilings, stored.warnings)
        why = stored.ceilings.why_provisional
        if why is not None:
            return FirstRun(
                "provisional",
                f"the peak of {where} is provisional ({why}): a quick ceiling measured after "
                f"the run ({seconds:.1f} s) is cached as provisional, not used, and measured "
                "again after the next run; `trainpace ceilings"
                + (f" --threads {threads_now}" if threads_now else "")
                + "` on a quiet machine measures the machine's",
                seconds, str(stored.path), stored.ceilings, stored.warnings)
        return FirstRun(
            "measured",
            f"no peak was known for {where}: measured a quick ceiling after the run "
            f"({seconds:.1f} s) and cached it at {stored.path}; `trainpace ceilings"
            + (f" --threads {threads_now}" if threads_now else "")
            + "` measures the full one",
            seconds, str(stored.path), stored.ceilings, stored.warnings)
    except Exception as exc:  # noqa: BLE001 - the run is over; a failed ceiling is a note
        return FirstRun("failed", f"measuring a quick ceiling failed ({type(exc).__name__}: "
                        f"{exc})", clock() - started)
