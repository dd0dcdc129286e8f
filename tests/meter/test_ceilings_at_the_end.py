"""The end of a run and the ceilings cache (issue 25 §3): a cache written by another run while
this one ran is read, not only recorded as "cached" in meta.json."""

import json

import torch

import trainpace
from trainpace.devices.ceilings import Ceilings, device_identity, save_ceilings


def test_a_ceiling_cached_by_another_run_meanwhile_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path / "cache"))
    a = torch.randn(128, 128)
    meter = trainpace.Meter(tmp_path / "run", window=5, warmup=1, console=False, report=False)
    for i in range(10):
        with meter.step(None):
            (a @ a).sum()
        if i == 3:  # another run caches this machine's ceilings (quietly measured)
            kind, name, threads = device_identity("cpu")
            save_ceilings(Ceilings(kind=kind, name=name, threads=threads, bandwidth_gb_s=20.0,
                                   matmul_tflops={"float32": 50.0},
                                   measured_at="2026-12-01T00:00:00+00:00",
                                   method={"quick": False, "quiet": True}))
    summary = meter.finish()
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["ceilings"]["status"] == "cached"
    assert summary.flops.peak_tflops == 50.0
    assert summary.flops.mfu_pct is not None
    assert summary.flops.peak_source.startswith("ceilings: measured 2026-12-01")
