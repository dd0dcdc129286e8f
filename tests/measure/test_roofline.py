import pytest
import torch

from measure.counting import count_step
from trainpace.devices.specs import Peak, Peaks
from trainpace.measure.flops import FamilyCount, StepCount
from trainpace.measure.roofline import ridge_flop_per_byte, roofline_verdict, step_figures

# A CPU-like machine: 20 GB/s, 0.5 TFLOP/s float32 -> ridge 25 FLOP/byte.
CPU_PEAKS = Peaks(
    bandwidth_gb_s=Peak(20.0, "test: bandwidth"),
    tflops={"float32": Peak(0.5, "test: float32")},
)


def _count(flops, moved, *, dtype="float32", samples=None):
    return StepCount(
        flops=flops, bytes=moved, ops=1,
        families=(FamilyCount(family="matmul", flops=flops, bytes=moved, ops=1),),
        flops_by_dtype={dtype: flops} if flops else {}, samples=samples,
    )


def test_ridge_and_verdict():
    assert ridge_flop_per_byte(0.5, 20.0) == 25.0
    assert ridge_flop_per_byte(None, 20.0) is None
    assert roofline_verdict(250, 10, 25.0) == "compute_bound"
    assert roofline_verdict(25, 1, 25.0) == "compute_bound"  # on the ridge: compute can cap it
    assert roofline_verdict(249, 10, 25.0) == "bandwidth_bound"
    assert roofline_verdict(1, 0, 25.0) is None
    assert roofline_verdict(1, 1, None) is None
    assert roofline_verdict(0, 1, None) == "bandwidth_bound"  # only moves data


def test_matmul_heavy_step_on_cpu_is_compute_bound():
    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    count = count_step(lambda: a @ b)
    flops, _ = step_figures(count, peaks=CPU_PEAKS, step_s=0.01)
    assert flops.per_step == 2 * n**3
    assert flops.bytes_per_step == 3 * n * n * 4
    assert flops.intensity_flop_per_byte == pytest.approx(2 * n**3 / (3 * n * n * 4))
    assert flops.ridge_flop_per_byte == 25.0
    assert flops.roofline == "compute_bound"
    assert flops.by_family[0]["family"] == "matmul"
    assert flops.by_family[0]["roofline"] == "compute_bound"


def test_elementwise_heavy_step_on_cpu_is_bandwidth_bound():
    n = 1 << 16
    x = torch.randn(n)

    def step():
        y = x * 2.0
        y = y + 1.0
        return torch.relu(y)

    count = count_step(step)
    flops, bandwidth = step_figures(count, peaks=CPU_PEAKS, step_s=0.001)
    assert flops.per_step == 0
    assert flops.bytes_per_step == 3 * 2 * n * 4
    assert flops.roofline == "bandwidth_bound"
    assert [f["roofline"] for f in flops.by_family] == ["bandwidth_bound"]
    assert bandwidth.achieved_gb_s == pytest.approx(6 * n * 4 / 0.001 / 1e9)
    assert bandwidth.util_pct == pytest.approx(100 * bandwidth.achieved_gb_s / 20.0)


def test_verdicts_against_measured_ceilings_of_this_machine():
    from trainpace.devices.ceilings import measure_ceilings

    # quiet by the injected load reading: used as peaks whatever else runs on the machine
    ceilings = measure_ceilings("cpu", quick=True, dtypes=("float32",), load=lambda: (0.0, 0.0))
    peaks = ceilings.peaks()
    n = 256
    a = torch.randn(n, n)
    # a 1 s step: 67 MFLOP/s, far below any peak measured even on a busy machine (an MFU above
    # 100% would void the ridge)
    matmul, _ = step_figures(count_step(lambda: a @ a @ a), peaks=peaks, step_s=1.0)
    elementwise, _ = step_figures(count_step(lambda: a + a), peaks=peaks, step_s=1.0)
    # The measured ridge moves with what else runs on the machine while the ceilings are taken
    # (a matmul's ~43 FLOP/byte sits near it under load): the verdict is the one this ridge gives.
    ridge = matmul.ridge_flop_per_byte
    assert ridge is not None and matmul.intensity_flop_per_byte > 1
    expected = "compute_bound" if matmul.intensity_flop_per_byte >= ridge else "bandwidth_bound"
    assert matmul.roofline == expected
    assert elementwise.roofline == "bandwidth_bound"  # no FLOPs counted for an add: any ridge
    assert matmul.peak_source.startswith("ceilings: measured")


def test_mfu_and_achieved_rate_are_exact():
    flops, bandwidth = step_figures(_count(1e12, 4e10), peaks=CPU_PEAKS, step_s=4.0)
    assert flops.achieved_tflops == 0.25
    assert flops.mfu_pct == 50.0
    assert flops.peak_tflops == 0.5
    assert flops.peak_source == "test: float32"
    assert flops.dtype == "float32"
    assert flops.source == "counted"
    assert bandwidth.achieved_gb_s == 10.0
    assert bandwidth.util_pct == 50.0
    assert bandwidth.peak_source == "test: bandwidth"


def test_rates_follow_samples_when_the_counted_step_size_is_known():
    count = _count(1e12, 1e9, samples=32)
    flops, _ = step_figures(count, peaks=CPU_PEAKS, step_s=10.0, samples_per_s=8.0)
    assert flops.achieved_tflops == 0.25  # 1e12/32 FLOPs per sample x 8 samples/s


def test_mfu_over_100_pct_is_an_error_not_a_number():
    flops, _ = step_figures(_count(1e12, 1e9), peaks=CPU_PEAKS, step_s=1.0)
    assert flops.mfu_pct is None
    assert flops.achieved_tflops == 1.0
    assert flops.error.startswith("MFU 200% exceeds 100%")


def test_bandwidth_over_the_peak_is_an_error_not_a_number():
    _, bandwidth = step_figures(_count(0, 1e11), peaks=CPU_PEAKS, step_s=1.0)
    assert bandwidth.achieved_gb_s == 100.0
    assert bandwidth.util_pct is None
    assert "exceeds the peak 20 GB/s" in bandwidth.error


def test_unknown_peaks_leave_mfu_and_verdict_null():
    flops, bandwidth = step_figures(_count(1e12, 1e9, dtype="bfloat16"), peaks=CPU_PEAKS, step_s=1.0)
    assert flops.mfu_pct is None
    assert flops.peak_tflops is None
    assert flops.roofline is None
    assert flops.dtype == "bfloat16"
    assert flops.achieved_tflops == 1.0
    flops, bandwidth = step_figures(_count(1e12, 1e9), peaks=Peaks(), step_s=1.0)
    assert bandwidth.util_pct is None
    assert bandwidth.achieved_gb_s == 1.0


def test_user_flops_replace_the_count_and_dtype_picks_the_peak():
    peaks = Peaks(tflops={"bfloat16": Peak(2.0, "test: bf16")})
    flops, _ = step_figures(None, peaks=peaks, step_s=2.0, flops_per_step=2e12, dtype="bf16")
    assert flops.per_step == 2e12
    assert flops.source == "user"
    assert flops.mfu_pct == 50.0
    assert flops.bytes_per_step is None
    assert flops.roofline is None


def test_nothing_known_gives_all_null():
    flops, bandwidth = step_figures(None, peaks=Peaks(), step_s=None)
    assert flops.per_step is None
    assert flops.achieved_tflops is None
    assert flops.source is None
    assert flops.by_family is None
    assert bandwidth.achieved_gb_s is None
