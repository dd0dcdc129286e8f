from __future__ import annotations

import pytest
from tracekit import HANDMADE, RESNET_NW0, prepared

from trainpace.trace.kernels import hta_steps, kernel_breakdown


def test_handmade_kernel_breakdown() -> None:
    p = prepared(HANDMADE)
    assert hta_steps(p) == 2
    k = kernel_breakdown(p, top=3)
    assert k is not None
    # kept kernels: 20, 10, 30, 5, 40 µs (the memcpy is device work, not a kernel)
    assert (k.count, k.per_step, k.median_us, k.short_pct) == (5, 2.5, 20.0, 20.0)
    # launch lags (kernel start - launch call end): 0, 5, 0 (clamped), 10, 45
    assert k.launch_lag_us == 5.0
    assert k.launch_lag_p90_us == pytest.approx(31.0)
    assert [(c.category, c.count, c.total_us) for c in k.categories] == [
        ("attention", 1, 40), ("communication", 1, 30), ("gemm", 1, 20),
        ("elementwise", 2, 15), ("memory", 1, 5)]
    assert k.categories[0].pct == pytest.approx(100 * 40 / 110)
    assert [(r.name, r.count, r.total_us) for r in k.top] == [
        ("flash_fwd_kernel", 1, 40),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 1, 30),
        ("volta_sgemm_128x64_nn", 1, 20)]


def test_resnet_kernels() -> None:
    k = kernel_breakdown(prepared(RESNET_NW0))
    assert k is not None
    # HTA 0.5.0's kernel breakdown of the same window: 492,891 µs computation, 10,140 memory
    assert sum(c.total_us for c in k.categories) == 492891.0 + 10140.0
    assert next(c for c in k.categories if c.category == "memory").total_us == 10140.0
    assert k.categories[0].category == "convolution"
    assert k.count == 7310 and k.per_step == 1462.0
    assert len(k.top) == 10 and k.top[0].total_us >= k.top[-1].total_us
