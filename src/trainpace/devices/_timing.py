"""How the ceilings are timed: best batches of a copy and of matrix products.

Each figure runs a warm-up, then repeats in batches (each batch long enough for the clock),
and keeps the best batch: a ceiling is what the machine can do, not what it usually does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from trainpace.errors import DeviceError

TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def best_seconds(run: Callable[[], object], sync: Callable[[], None], *, budget_s: float,
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


def copy_gb_s(dev: torch.device, mib: int, sync: Callable[[], None], *, budget_s: float,
               clock: Callable[[], float]) -> float:
    """Bytes read + written per second by a copy of ``mib`` MiB (the buffers die on return)."""
    elements = mib * 2**20 // 4
    src = torch.ones(elements, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), sync, budget_s=budget_s, clock=clock)
    return 2 * elements * 4 / seconds / 1e9


_PROBE_N = 256


def matmul_size(dtype: str, max_n: int, dev: torch.device, sync: Callable[[], None],
                 clock: Callable[[], float]) -> int:
    """The matrix size (≤ ``max_n``) for one product to take ~50 ms at this dtype's rate.

    A dtype the device emulates slowly (bfloat16 on a CPU without native support runs
    100x slower than float32) would otherwise take minutes at the size a fast one needs.
    """
    if max_n <= _PROBE_N or dev.type == "cuda":
        return max_n  # a GPU runs every dtype natively; a small probe would be launch-bound
    run = matmul_runner(dtype, _PROBE_N, dev)
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


def matmul_runner(dtype: str, n: int, dev: torch.device) -> Callable[[], object]:
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
    a = torch.randn(n, n, device=dev, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device=dev, dtype=TORCH_DTYPES[dtype])
    return lambda: torch.mm(a, b)
