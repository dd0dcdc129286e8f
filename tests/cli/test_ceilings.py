import json

import pytest
import torch

from trainpace.cli import main
from trainpace.devices import ceilings as ceilings_module
from trainpace.devices.ceilings import Ceilings, device_identity


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_json_measures_and_caches(cache, capsys):
    assert main(["ceilings", "--device", "cpu", "--quick", "--dtype", "float32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["kind"] == "cpu"
    assert out["device"]["name"] == device_identity("cpu")[1]
    assert out["bandwidth_gb_s"] > 0
    assert set(out["matmul_tflops"]) == {"float32"}
    assert out["matmul_tflops"]["float32"] > 0
    cached = json.loads((cache / "ceilings").glob("cpu-*.json").__next__().read_text())
    assert cached["matmul_tflops"] == out["matmul_tflops"]
    assert out["cache"].startswith(str(cache))


def _fake_measure(device, *, dtypes=None, quick=False):
    kind, name, threads = device_identity(device)
    return Ceilings(kind=kind, name=name, threads=threads, bandwidth_gb_s=10.0,
                    matmul_tflops={"float32": 0.5}, skipped={"float8": "needs a GPU"},
                    measured_at="2026-01-01T00:00:00+00:00", method={"matmul_n": {"float32": 512}, "quiet": True})


def test_text_output_and_cached_read(cache, capsys, monkeypatch):
    monkeypatch.setattr(ceilings_module, "measure_ceilings", _fake_measure)
    assert main(["ceilings", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "memory bandwidth        10.0 GB/s" in text
    assert "matmul float32           0.5 TFLOP/s   (n=512)" in text
    assert "matmul float8     not measured: needs a GPU" in text
    assert "cached in" in text
    assert main(["ceilings", "--device", "cpu", "--cached", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bandwidth_gb_s"] == 10.0


def test_no_save_writes_nothing(cache, capsys, monkeypatch):
    monkeypatch.setattr(ceilings_module, "measure_ceilings", _fake_measure)
    assert main(["ceilings", "--device", "cpu", "--no-save", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cache"] is None
    assert not (cache / "ceilings").exists()


def test_cached_without_a_cache_is_a_clear_error(cache, capsys):
    assert main(["ceilings", "--device", "cpu", "--cached"]) == 1
    err = capsys.readouterr().err
    assert "trainpace ceilings: error:" in err
    assert "no ceilings cached at" in err
    assert "run `trainpace ceilings`" in err


def test_cuda_without_a_gpu_is_a_clear_error(cache, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["ceilings", "--device", "cuda"]) == 1
    assert "no CUDA device is visible to PyTorch" in capsys.readouterr().err


def test_bad_dtype_is_a_clear_error(cache, capsys):
    assert main(["ceilings", "--device", "cpu", "--dtype", "int4", "--quick"]) == 1
    assert "dtype must be one of" in capsys.readouterr().err


def test_an_unknown_device_is_one_line_and_exit_1(capsys):
    from trainpace.cli import main

    assert main(["ceilings", "--device", "tpu"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "trainpace ceilings: error: tpu: not a device name; use cpu, cuda or cuda:N"


def test_threads_choose_the_thread_count_and_the_cache_entry(cache, capsys):
    before = torch.get_num_threads()
    assert main(["ceilings", "--device", "cpu", "--threads", "1", "--quick", "--dtype",
                 "float32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["threads"] == 1
    assert out["cache"].endswith("-1t.json")
    assert torch.get_num_threads() == before  # restored after the measurement
    assert main(["ceilings", "--device", "cpu", "--threads", "1", "--cached", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"]["threads"] == 1
    with pytest.raises(SystemExit) as exited:  # bad usage: argparse, exit 2
        main(["ceilings", "--device", "cpu", "--threads", "0"])
    assert exited.value.code == 2
    assert "argument --threads: must be >= 1, got 0" in capsys.readouterr().err


def test_a_quick_run_warns_and_keeps_the_full_figures(cache, capsys, monkeypatch):
    monkeypatch.setattr(ceilings_module, "measure_ceilings", _fake_measure)
    assert main(["ceilings", "--device", "cpu"]) == 0
    capsys.readouterr()

    def quick(device, *, dtypes=None, quick=False):
        full = _fake_measure(device)
        return Ceilings(**{**full.__dict__, "matmul_tflops": {"float32": 0.006},
                           "method": {"quick": True, "quiet": True}})

    monkeypatch.setattr(ceilings_module, "measure_ceilings", quick)
    assert main(["ceilings", "--device", "cpu", "--quick", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "a quick measurement does not replace the full one" in captured.err
    assert out["cached"]["matmul_tflops"] == {"float32": 0.5}
    assert main(["ceilings", "--device", "cpu", "--cached", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matmul_tflops"] == {"float32": 0.5}


def test_a_busy_measurement_is_cached_as_provisional_and_says_so(cache, capsys, monkeypatch):
    def busy(device, *, dtypes=None, quick=False):
        full = _fake_measure(device)
        return Ceilings(**{**full.__dict__, "method": {"quiet": False, "others_cpu_cores": 1.3}})

    monkeypatch.setattr(ceilings_module, "measure_ceilings", busy)
    assert main(["ceilings", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert ("provisional: measured while other processes took 1.30 CPU cores (quiet is under "
            "0.25); cached as provisional, never used as this machine's peak") in text
    assert text.rstrip().endswith("as provisional")
    assert "the meter uses these" not in text
    assert main(["ceilings", "--device", "cpu", "--cached", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["provisional"].startswith("measured while other")
