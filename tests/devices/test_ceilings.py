import json
import time
from pathlib import Path

import pytest
import torch

from devices.threads import torch_threads
from trainpace.devices import _timing
from trainpace.devices._timing import best_seconds
from trainpace.devices.ceilings import (
    Ceilings,
    cache_dir,
    cache_path,
    device_identity,
    ensure_ceilings,
    load_ceilings,
    measure_ceilings,
    save_ceilings,
    store_ceilings,
)
from trainpace.errors import ConfigError, DeviceError


class ManualClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_best_seconds_keeps_the_fastest_batch():
    clock = ManualClock()
    durations = iter([0.5, 0.01] + [0.02, 0.01, 0.004, 0.03] * 100)

    def run():
        clock.now += next(durations)

    # warm-up 0.5 s (ignored), single 0.01 s -> batches of 2 runs; best batch: 0.004 + 0.03?
    # batches are (0.02+0.01), (0.004+0.03), (0.02+0.01), ... -> best per run = 0.015
    best = best_seconds(run, lambda: None, budget_s=0.1, clock=clock)
    assert best == pytest.approx(0.015)


def test_measure_cpu_ceilings_small():
    result = measure_ceilings("cpu", dtypes=["fp32", "float8"], quick=True, copy_mib=4, matmul_n=128)
    assert result.kind == "cpu"
    assert result.threads == torch.get_num_threads()
    assert result.bandwidth_gb_s > 0
    assert set(result.matmul_tflops) == {"float32"}
    assert result.matmul_tflops["float32"] > 0
    assert result.method["matmul_n"] == {"float32": 128}
    assert "compute capability 8.9" in result.skipped["float8"]
    assert torch.get_float32_matmul_precision() == "highest"  # restored


def test_tf32_on_cpu_is_a_config_error():
    with pytest.raises(ConfigError, match=r"dtype must not be tf32 on a CPU \(a CUDA tensor-core mode\), got 'tf32'"):
        measure_ceilings("cpu", dtypes=["tf32"], copy_mib=1, matmul_n=64)


def test_slow_dtypes_get_smaller_matrices(monkeypatch):
    # a dtype at 1 GFLOP/s must not be measured at the size a 1 TFLOP/s dtype needs
    clock = ManualClock()

    class Runner:
        def __init__(self, n, flops_per_s):
            self.n, self.rate = n, flops_per_s

        def __call__(self):
            clock.now += 2 * self.n**3 / self.rate

    monkeypatch.setattr(_timing, "matmul_runner", lambda dtype, n, dev: Runner(n, 1e9))
    size = _timing.matmul_size("bfloat16", 4096, torch.device("cpu"), lambda: None, clock)
    assert size == 256  # (1e9 * 0.05 / 2) ** (1/3) = 292 -> 256
    monkeypatch.setattr(_timing, "matmul_runner", lambda dtype, n, dev: Runner(n, 1e12))
    size = _timing.matmul_size("float32", 4096, torch.device("cpu"), lambda: None, clock)
    assert size == 2880  # (1e12 * 0.05 / 2) ** (1/3) = 2924 -> a multiple of 64


def test_cuda_without_a_gpu_is_a_device_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceError, match="cuda: no CUDA device is visible to PyTorch"):
        device_identity("cuda")
    with pytest.raises(DeviceError, match="cpu or cuda devices only"):
        device_identity("meta")


def test_cache_dir_precedence(tmp_path):
    assert cache_dir({"TRAINPACE_CACHE_DIR": "/a", "XDG_CACHE_HOME": "/b"}) == Path("/a")
    assert cache_dir({"XDG_CACHE_HOME": "/b"}) == Path("/b/trainpace")
    assert cache_dir({}) == Path.home() / ".cache" / "trainpace"
    assert cache_path("cpu", "AMD EPYC 7763 64-Core Processor", 8, {"TRAINPACE_CACHE_DIR": "/c"}) == (
        Path("/c/ceilings/cpu-amd-epyc-7763-64-core-processor-8t.json")
    )
    assert cache_path("cuda", "NVIDIA H200", None, {"TRAINPACE_CACHE_DIR": "/c"}).name == "cuda-nvidia-h200.json"


def _fake(**overrides):
    kind, name, threads = device_identity("cpu")
    fields = {"kind": kind, "name": name, "threads": threads, "bandwidth_gb_s": 12.5,
              "matmul_tflops": {"float32": 0.25}, "measured_at": "2026-01-02T03:04:05+00:00",
              "torch_version": "2.13", "method": {"quick": True, "quiet": True}}
    fields.update(overrides)
    return Ceilings(**fields)


def test_save_and_load_round_trip(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    assert load_ceilings("cpu", env) is None
    saved = _fake()
    path = save_ceilings(saved, env)
    assert path.parent == tmp_path / "ceilings"
    assert json.loads(path.read_text())["bandwidth_gb_s"] == 12.5
    assert load_ceilings("cpu", env) == saved


def test_other_identity_or_corrupt_cache_is_ignored(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    path = save_ceilings(_fake(), env)
    path.write_text("{not json")
    assert load_ceilings("cpu", env) is None
    other = _fake(name="Some Other CPU")
    path.write_text(json.dumps(other.to_dict()))
    assert load_ceilings("cpu", env) is None
    assert load_ceilings("cuda", env) is None  # no GPU, or no cached GPU ceilings


def test_peaks_name_their_source():
    peaks = _fake().peaks()
    assert peaks.bandwidth_gb_s.value == 12.5
    assert peaks.flops("fp32").value == 0.25
    assert peaks.bandwidth_gb_s.source.startswith("ceilings: measured 2026-01-02 on ")
    assert "threads" in peaks.bandwidth_gb_s.source


def test_from_dict_rejects_other_schemas():
    with pytest.raises(ValueError, match="schema is 'x'"):
        Ceilings.from_dict({"schema": "x"})


# ---- the cache keeps its best figures ----------------------------------------------------

def _measured(bandwidth=12.5, tflops=0.25, quick=False, quiet=True, **overrides):
    return _fake(bandwidth_gb_s=bandwidth, matmul_tflops={"float32": tflops},
                 method={"quick": quick, "quiet": quiet}, **overrides)


def test_a_quick_figure_never_replaces_a_full_one(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    full = _measured()
    assert store_ceilings(full, env).saved
    # the case: a quick run 84× lower than the cached full one
    stored = store_ceilings(_measured(bandwidth=1.0, tflops=0.25 / 84, quick=True), env)
    assert not stored.saved
    assert stored.ceilings == full
    assert "a quick measurement does not replace the full one" in stored.warnings[0]
    assert load_ceilings("cpu", env) == full


def test_a_full_figure_far_from_the_cached_one_is_rejected_the_rest_kept(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    store_ceilings(_measured(), env)
    stored = store_ceilings(_measured(bandwidth=13.0, tflops=0.25 / 84), env)
    assert set(stored.rejected) == {"matmul float32"}
    assert "0.012× the cached 0.25 TFLOP/s" in stored.rejected["matmul float32"]
    assert "rejected" in stored.warnings[0]
    kept = load_ceilings("cpu", env)
    assert kept.bandwidth_gb_s == 13.0  # within 4× of the cached figure: the new one
    assert kept.matmul_tflops == {"float32": 0.25}  # the cached figure stays


def test_a_quick_figure_fills_an_empty_cache_and_a_full_one_replaces_it(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    assert store_ceilings(_measured(quick=True), env).saved
    assert load_ceilings("cpu", env).quick
    assert store_ceilings(_measured(bandwidth=20.0, tflops=0.3), env).saved
    kept = load_ceilings("cpu", env)
    assert (kept.quick, kept.bandwidth_gb_s) == (False, 20.0)


def test_a_figure_beyond_the_spec_sheet_is_rejected(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    h100 = _measured(bandwidth=9000.0, tflops=500.0, kind="cuda", name="NVIDIA H100 80GB HBM3",
                     threads=None)
    stored = store_ceilings(h100, env)  # the sheet: 3350 GB/s, 67 TFLOP/s float32
    assert set(stored.rejected) == {"bandwidth", "matmul float32"}
    assert not stored.saved  # nothing left worth caching
    assert "the spec sheet's" in stored.rejected["bandwidth"]


def test_a_cpu_is_measured_with_the_threads_the_process_has_and_they_are_left_alone(tmp_path):
    # issue 22: no library call changes process-wide state; the count is recorded instead
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    with torch_threads(1):
        assert device_identity("cpu")[2] == 1
        measured = measure_ceilings("cpu", dtypes=["fp32"], quick=True, copy_mib=1, matmul_n=64,
                                    budget_s=0.01, load=lambda: (0.0, 0.0))
        assert torch.get_num_threads() == 1
        assert measured.threads == 1
        found = ensure_ceilings("cpu", env=env, budget_s=0.1, measure=Counting())
        assert torch.get_num_threads() == 1
        assert found.status == "measured" and found.ceilings.threads == 1
        # the run had 3 threads, the process now has 1: nothing is set, nothing measured
        measure = Counting()
        skipped = ensure_ceilings("cpu", threads=3, env=env, measure=measure)
        assert torch.get_num_threads() == 1 and measure.calls == []
        assert skipped.status == "skipped"
        assert skipped.note.endswith("the run had 3 torch threads, the process now has 1: no "
                                     "ceiling measured for the run's; `trainpace ceilings "
                                     "--threads 3` measures it")


# ---- the first run -----------------------------------------------------------------------

@pytest.fixture
def one_thread():
    """The run's thread count, 1: the process has it for the test (as the user's script set it)."""
    with torch_threads(1):
        yield

class Counting:
    def __init__(self, tflops=0.25):
        self.calls, self.tflops = [], tflops

    def __call__(self, device, **kwargs):
        self.calls.append(kwargs)
        kind, name, threads = device_identity(device)  # what the measurement runs with
        return _measured(tflops=self.tflops, quick=True, kind=kind, name=name, threads=threads)


def test_the_first_run_measures_once_then_reads_the_cache(tmp_path, one_thread):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    measure = Counting()
    first = ensure_ceilings("cpu", threads=1, env=env, measure=measure)
    assert first.status == "measured" and first.measured
    assert "threads" not in measure.calls[0] and measure.calls[0]["quick"] is True
    assert measure.calls[0]["dtypes"] == ["float32"]
    assert "measured a quick ceiling after the run" in first.note
    assert "`trainpace ceilings --threads 1` measures the full one" in first.note
    assert first.path.endswith("-1t.json")
    with torch_threads(1):
        assert load_ceilings("cpu", env).matmul_tflops == {"float32": 0.25}
    second = ensure_ceilings("cpu", threads=1, env=env, measure=measure)
    assert second.status == "cached"
    assert len(measure.calls) == 1
    # another thread count is another identity: measured for itself
    with torch_threads(2):
        assert ensure_ceilings("cpu", threads=2, env=env, measure=measure).status == "measured"
    assert first.to_dict()["ceilings"]["device"]["threads"] == 1


def test_the_first_run_never_raises(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}

    def broken(device, **kwargs):
        raise RuntimeError("no memory")

    failed = ensure_ceilings("cpu", env=env, measure=broken)
    assert failed.status == "failed"
    assert "RuntimeError: no memory" in failed.note


def test_the_first_run_splits_its_budget_and_says_how_long_it_took(tmp_path, one_thread):
    # each figure gets a sixth of the budget; the measurement "takes" 1.7 s on the clock
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    clock = ManualClock()

    class Timed(Counting):
        def __call__(self, device, **kwargs):
            clock.now += 1.7
            return super().__call__(device, **kwargs)

    measure = Timed()
    found = ensure_ceilings("cpu", threads=1, budget_s=3.0, env=env, clock=clock,
                            measure=measure)
    assert found.status == "measured", found.note
    assert measure.calls[0]["budget_s"] == pytest.approx(0.5)
    assert found.seconds == pytest.approx(1.7)


def test_the_first_run_measures_for_real(tmp_path, one_thread):
    # the real measurement; how long it takes is the machine's (benchmarks measure speed)
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    started = time.perf_counter()
    # the load reading is injected: whether other processes held the CPU meanwhile is the
    # machine's, and the provisional path has its own tests
    def quiet(device, **kwargs):
        return measure_ceilings(device, load=lambda: (0.0, 0.0), **kwargs)

    found = ensure_ceilings("cpu", threads=1, env=env, measure=quiet)
    elapsed = time.perf_counter() - started
    assert found.status == "measured", found.note
    assert found.ceilings.matmul_tflops["float32"] > 0
    assert found.ceilings.bandwidth_gb_s > 0
    assert 0 < found.seconds <= elapsed  # timed inside the call


def test_a_first_run_never_overwrites_a_full_measurement_and_says_so(tmp_path, one_thread):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    with torch_threads(1):
        kind, name, threads = device_identity("cpu")
    full = _measured(bandwidth=12.5, tflops=10.0, kind=kind, name=name, threads=threads)
    store_ceilings(full, env)

    def quick_fp16(device, **kwargs):
        return Ceilings(kind=kind, name=name, threads=threads, bandwidth_gb_s=0.1,
                        matmul_tflops={"float16": 0.1}, method={"quick": True, "quiet": True})

    # float16 is not in the full measurement: the first run measures it, quick
    found = ensure_ceilings("cpu", threads=1, dtype="fp16", env=env, measure=quick_fp16)
    assert found.status == "rejected"
    assert "a quick measurement does not replace the full one" in found.note
    with torch_threads(1):
        assert load_ceilings("cpu", env) == full


# ---- a peak measured on a busy machine is provisional (issue 25 §3) -----------------------

class Load:
    """(machine busy CPU s, own CPU s) readings: others take ``others_cores`` per clock second."""

    def __init__(self, clock, others_cores, own_cores=1.0):
        self.clock, self.others, self.own = clock, others_cores, own_cores

    def __call__(self):
        t = self.clock.now  # reads the time without moving it
        return (self.others + self.own) * t, self.own * t


class TickingClock(ManualClock):
    def __call__(self):
        self.now += 0.001
        return self.now


@pytest.mark.parametrize(("others", "quiet"), [(0.0, True), (0.24, True), (0.25, False),
                                               (1.3, False)])
def test_what_other_processes_took_decides_whether_a_ceiling_is_quiet(others, quiet):
    clock = TickingClock()
    result = measure_ceilings("cpu", dtypes=["fp32"], quick=True, copy_mib=1, matmul_n=64,
                              clock=clock, load=Load(clock, others))
    assert result.method["others_cpu_cores"] == pytest.approx(others, abs=1e-3)
    assert result.quiet is quiet
    assert (result.why_provisional is None) is quiet
    assert bool(result.peaks().tflops) is quiet  # a provisional ceiling is never a peak
    if not quiet:
        assert f"other processes took {others:.2f} CPU cores" in result.why_provisional


def test_a_cache_without_a_load_check_is_provisional():
    old = _fake(method={"quick": False})  # written before trainpace checked the load
    assert not old.quiet
    assert old.why_provisional == "measured without a check of what other processes took"
    assert old.peaks().bandwidth_gb_s is None


def test_a_quiet_measurement_replaces_a_provisional_one_whatever_its_figures(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    # the figures: 0.0225 TFLOP/s and 6.99 GB/s busy, 0.304 and 26 quiet (13×, 3.7×)
    busy = _measured(bandwidth=6.99, tflops=0.0225, quiet=False)
    assert store_ceilings(busy, env).saved
    stored = store_ceilings(_measured(bandwidth=26.0, tflops=0.304, quick=True), env)
    assert stored.saved and not stored.rejected
    kept = load_ceilings("cpu", env)
    assert (kept.quiet, kept.bandwidth_gb_s, kept.matmul_tflops) == (True, 26.0, {"float32": 0.304})
    # and a busy one never replaces the quiet one
    stored = store_ceilings(_measured(bandwidth=6.99, tflops=0.0225, quiet=False), env)
    assert not stored.saved
    assert "a full provisional measurement does not replace the quick one" in stored.warnings[0]
    assert load_ceilings("cpu", env).matmul_tflops == {"float32": 0.304}


def test_a_full_measurement_replaces_a_quick_one_even_28x_higher(tmp_path):
    # the case: `ceilings --threads 2` rejected a float16 figure 28× the quick one
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    store_ceilings(_fake(matmul_tflops={"float16": 0.0095}, method={"quick": True, "quiet": True}),
                   env)
    full = _fake(matmul_tflops={"float16": 0.0095 * 28, "float32": 0.3},
                 method={"quick": False, "quiet": True})
    stored = store_ceilings(full, env)
    assert stored.saved and not stored.rejected and not stored.warnings
    assert load_ceilings("cpu", env).matmul_tflops == {"float16": pytest.approx(0.266),
                                                       "float32": 0.3}


def test_at_equal_standing_a_higher_figure_is_taken_a_far_lower_one_rejected(tmp_path):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    store_ceilings(_measured(tflops=0.1), env)
    assert not store_ceilings(_measured(tflops=0.5), env).rejected  # 5× higher: a load only lowers
    stored = store_ceilings(_measured(tflops=0.1), env)  # 5× lower: a loaded machine
    assert set(stored.rejected) == {"matmul float32"}
    assert load_ceilings("cpu", env).matmul_tflops == {"float32": 0.5}


def test_a_provisional_first_run_says_so_and_measures_again_next_time(tmp_path, one_thread):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    busy = {"value": True}

    def measure(device, **kwargs):
        kind, name, threads = device_identity(device)
        if busy["value"]:
            return _fake(bandwidth_gb_s=6.99, matmul_tflops={"float32": 0.0225}, kind=kind,
                         name=name, threads=threads,
                         method={"quick": True, "quiet": False, "others_cpu_cores": 1.3})
        return _measured(bandwidth=26.0, tflops=0.304, quick=True, kind=kind, name=name,
                         threads=threads)

    first = ensure_ceilings("cpu", threads=1, env=env, measure=measure)
    assert first.status == "provisional" and first.peaks_changed
    assert "other processes took 1.30 CPU cores" in first.note
    assert "measured again after the next run" in first.note
    # the next run: the provisional cache is not a peak, so it measures again; now quiet
    busy["value"] = False
    second = ensure_ceilings("cpu", threads=1, env=env, measure=measure)
    assert second.status == "measured"
    with torch_threads(1):
        assert load_ceilings("cpu", env).peaks().flops("fp32").value == 0.304
    third = ensure_ceilings("cpu", threads=1, env=env, measure=measure)
    assert third.status == "cached" and third.peaks_changed  # written by another run: read it


def test_a_run_above_a_cached_ceiling_marks_it_and_measures_again(tmp_path, one_thread):
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    with torch_threads(1):
        kind, name, threads = device_identity("cpu")
    store_ceilings(_measured(tflops=0.0225, kind=kind, name=name, threads=threads), env)
    measure = Counting(tflops=0.304)
    found = ensure_ceilings("cpu", threads=1, env=env, measure=measure,
                            achieved={"matmul float32": 0.03})  # "MFU 133%"
    assert len(measure.calls) == 1
    assert found.status == "measured"
    with torch_threads(1):
        assert load_ceilings("cpu", env).matmul_tflops == {"float32": 0.304}
    # and a measurement that is below the run's figure is provisional itself
    found = ensure_ceilings("cpu", threads=1, env=env, measure=Counting(tflops=0.2),
                            achieved={"matmul float32": 0.35})
    assert found.status == "provisional"
    assert "a run achieved 0.35 TFLOP/s matmul float32, above the ceiling's 0.2" in found.note
