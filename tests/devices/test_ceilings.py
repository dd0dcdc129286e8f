import json
from pathlib import Path

import pytest
import torch

from trainpace.devices import ceilings as ceilings_module
from trainpace.devices.ceilings import (
    Ceilings,
    _best_seconds,
    cache_dir,
    cache_path,
    device_identity,
    load_ceilings,
    measure_ceilings,
    save_ceilings,
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
    best = _best_seconds(run, lambda: None, budget_s=0.1, clock=clock)
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

    monkeypatch.setattr(ceilings_module, "_matmul_runner", lambda dtype, n, dev: Runner(n, 1e9))
    size = ceilings_module._matmul_size("bfloat16", 4096, torch.device("cpu"), lambda: None, clock)
    assert size == 256  # (1e9 * 0.05 / 2) ** (1/3) = 292 -> 256
    monkeypatch.setattr(ceilings_module, "_matmul_runner", lambda dtype, n, dev: Runner(n, 1e12))
    size = ceilings_module._matmul_size("float32", 4096, torch.device("cpu"), lambda: None, clock)
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
              "torch_version": "2.13", "method": {"quick": True}}
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
