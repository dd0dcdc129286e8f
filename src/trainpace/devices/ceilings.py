"""Measured ceilings: the memory bandwidth and matmul rates this machine really reaches.

The spec table knows data-center GPUs; it knows no CPU, and a card's sustained rate can sit
below its sheet (power caps, clocks). ``trainpace ceilings`` measures both figures here:

- bandwidth: a large tensor copy (bytes read + bytes written, so 2 x the buffer), buffers
  far larger than any cache;
- matmul: square matrix products per dtype, 2·n³ FLOPs each.

Each runs a warm-up, then repeats in batches (each batch long enough for the clock), and
keeps the best batch: a ceiling is what the machine can do, not what it usually does. The
result is cached per device (the CPU's thread count is part of a CPU's identity) under
``$TRAINPACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainpace``, else ``~/.cache/trainpace``;
the meter reads the cache where the spec table has no entry.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainpace.devices.specs import Peak, Peaks, canonical_dtype
from trainpace.errors import ConfigError, DeviceError

SCHEMA = "trainpace.ceilings/1"

CPU_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
CUDA_DTYPES: tuple[str, ...] = ("float32", "tf32", "bfloat16", "float16", "float8")

_TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True, kw_only=True)
class Ceilings:
    """One device's measured ceilings (GB/s and TFLOP/s per dtype)."""

    kind: str
    name: str
    threads: int | None = None  # CPU: torch's intra-op threads during the measurement
    bandwidth_gb_s: float | None = None
    matmul_tflops: Mapping[str, float] = field(default_factory=dict)
    measured_at: str | None = None
    torch_version: str | None = None
    method: Mapping[str, Any] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)  # dtype -> why not measured

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``trainpace ceilings --json`` and of the cache file."""
        return {
            "schema": SCHEMA,
            "device": {"kind": self.kind, "name": self.name, "threads": self.threads},
            "bandwidth_gb_s": self.bandwidth_gb_s,
            "matmul_tflops": dict(self.matmul_tflops),
            "skipped": dict(self.skipped),
            "measured_at": self.measured_at,
            "torch": self.torch_version,
            "method": dict(self.method),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ceilings:
        """Read :meth:`to_dict` output back; ValueError if it is not one."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        device = data["device"]
        return cls(
            kind=str(device["kind"]),
            name=str(device["name"]),
            threads=device.get("threads"),
            bandwidth_gb_s=data.get("bandwidth_gb_s"),
            matmul_tflops={str(k): float(v) for k, v in data.get("matmul_tflops", {}).items()},
            measured_at=data.get("measured_at"),
            torch_version=data.get("torch"),
            method=data.get("method") or {},
            skipped=data.get("skipped") or {},
        )

    def peaks(self) -> Peaks:
        """These ceilings as :class:`Peaks`, each naming where it came from."""
        day = (self.measured_at or "")[:10] or "at an unknown date"
        where = f"{self.name}" + (f", {self.threads} threads" if self.threads else "")
        source = f"ceilings: measured {day} on {where} (trainpace ceilings)"
        return Peaks(
            bandwidth_gb_s=Peak(self.bandwidth_gb_s, source) if self.bandwidth_gb_s else None,
            tflops={k: Peak(v, source) for k, v in self.matmul_tflops.items() if v > 0},
        )


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


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where ceilings are cached (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("TRAINPACE_CACHE_DIR"):
        return Path(env["TRAINPACE_CACHE_DIR"])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "trainpace"
    return Path.home() / ".cache" / "trainpace"


def cache_path(kind: str, name: str, threads: int | None,
               env: Mapping[str, str] | None = None) -> Path:
    """The cache file of one device identity."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"
    suffix = f"-{threads}t" if threads else ""
    return cache_dir(env) / "ceilings" / f"{kind}-{slug}{suffix}.json"


def load_ceilings(device: str | torch.device,
                  env: Mapping[str, str] | None = None) -> Ceilings | None:
    """The cached ceilings of ``device``, or None if none were measured (or unreadable)."""
    try:
        kind, name, threads = device_identity(device)
        path = cache_path(kind, name, threads, env)
        ceilings = Ceilings.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (DeviceError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if (ceilings.kind, ceilings.name, ceilings.threads) != (kind, name, threads):
        return None
    return ceilings


def save_ceilings(ceilings: Ceilings, env: Mapping[str, str] | None = None) -> Path:
    """Write ``ceilings`` to its cache file (atomically) and return the path."""
    path = cache_path(ceilings.kind, ceilings.name, ceilings.threads, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(ceilings.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _best_seconds(run: Callable[[], object], sync: Callable[[], None], *, budget_s: float,
                  clock: Callable[[], float]) -> float:
    """Best time of one ``run()``: warm-up, then batches of at least ~20 ms, within a budget."""
    run()
    sync()
    start = clock()
    run()
    sync()
    single = max(clock() - start, 1e-9)
    inner = max(1, math.ceil(0.02 / single))
    repeats = max(3, min(30, int(budget_s / (single * inner))))
    best = math.inf
    for _ in range(repeats):
        start = clock()
        for _ in range(inner):
            run()
        sync()
        best = min(best, (clock() - start) / inner)
    return best


def _copy_gb_s(dev: torch.device, mib: int, sync: Callable[[], None], *, budget_s: float,
               clock: Callable[[], float]) -> float:
    """Bytes read + written per second by a copy of ``mib`` MiB (the buffers die on return)."""
    elements = mib * 2**20 // 4
    src = torch.ones(elements, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), sync, budget_s=budget_s, clock=clock)
    return 2 * elements * 4 / seconds / 1e9


_PROBE_N = 256


def _matmul_size(dtype: str, max_n: int, dev: torch.device, sync: Callable[[], None],
                 clock: Callable[[], float]) -> int:
    """The matrix size (≤ ``max_n``) for one product to take ~50 ms at this dtype's rate.

    A dtype the device emulates slowly (bfloat16 on a CPU without native support runs
    100x slower than float32) would otherwise take minutes at the size a fast one needs.
    """
    if max_n <= _PROBE_N or dev.type == "cuda":
        return max_n  # a GPU runs every dtype natively; a small probe would be launch-bound
    run = _matmul_runner(dtype, _PROBE_N, dev)
    run()
    sync()
    best = math.inf
    probe_start = clock()
    for _ in range(50):  # the best of many: a short run can lose its core to another process
        start = clock()
        run()
        sync()
        best = min(best, clock() - start)
        if clock() - probe_start > 0.05:
            break
    rate = 2 * _PROBE_N**3 / max(best, 1e-9)
    fitting = int((rate * 0.05 / 2) ** (1 / 3)) // 64 * 64
    return max(_PROBE_N, min(max_n, fitting))


def _matmul_runner(dtype: str, n: int, dev: torch.device) -> Callable[[], object]:
    if dtype == "float8":
        if dev.type != "cuda" or torch.cuda.get_device_capability(dev) < (8, 9):
            raise DeviceError("float8 matmul needs a CUDA device of compute capability 8.9+")
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major
        scale = torch.tensor(1.0, device=dev)

        def run_fp8() -> object:
            return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

        run_fp8()  # fails here, not in the timing loop, when unsupported
        return run_fp8
    a = torch.randn(n, n, device=dev, dtype=_TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device=dev, dtype=_TORCH_DTYPES[dtype])
    return lambda: torch.mm(a, b)


def measure_ceilings(
    device: str | torch.device = "cpu",
    *,
    dtypes: Sequence[str] | None = None,
    quick: bool = False,
    copy_mib: int | None = None,
    matmul_n: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Ceilings:
    """Measure the bandwidth and matmul ceilings of ``device`` (see the module docstring).

    ``quick`` uses small sizes and short budgets (a second or two on a CPU): good enough to
    check that it works, less exact. ``dtypes`` defaults to every dtype the device kind
    supports; a dtype the device cannot run is listed in ``skipped`` with the reason.
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
        matmul_n = matmul_n or (256 if quick else 2048)
    else:
        copy_mib = copy_mib or (256 if quick else 2048)
        matmul_n = matmul_n or (2048 if quick else 8192)
    budget_s = 0.2 if quick else 1.0

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    bandwidth = _copy_gb_s(dev, copy_mib, sync, budget_s=budget_s, clock=clock)

    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    skipped: dict[str, str] = {}
    previous_precision = torch.get_float32_matmul_precision()
    try:
        for dtype in wanted:
            torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
            try:
                n = _matmul_size(dtype, matmul_n, dev, sync, clock)
                run = _matmul_runner(dtype, n, dev)
            except (DeviceError, RuntimeError, TypeError) as exc:
                skipped[dtype] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                continue
            seconds = _best_seconds(run, sync, budget_s=budget_s, clock=clock)
            rates[dtype] = 2 * n**3 / seconds / 1e12
            sizes[dtype] = n
    finally:
        torch.set_float32_matmul_precision(previous_precision)

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
        },
    )
