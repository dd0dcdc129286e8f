"""The Meter's summaries: the merged job's diagnosis still knows trainpace's window."""

from __future__ import annotations

import torch

import trainpace


def test_the_merged_meta_without_a_config_still_names_trainpaces_window(tmp_path, clock):
    # rank 0 diagnoses the job's merged summary with the job's meta (no "config"): a slow
    # step after each of its window boundaries is still trainpace's own, never the user's
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=20, warmup=0,
                            console=False, report=False, count_flops=False)
    for i, b in enumerate(meter.loader([torch.zeros(4)] * 200), start=1):
        with meter.step(b):
            clock.advance(0.018 if i % 20 == 1 and i > 1 else 0.01)
    summary = meter.finish()
    merged = meter._summaries.diagnosed(summary, {"schema": "trainpace.meta/1", "rank": None})
    periodic = [f for f in merged.diagnosis.findings if f.id == "periodic_stall"]
    assert [(f.evidence["period_steps"], f.evidence["cause"], f.severity) for f in periodic] == [
        (20, "trainpace_window", "info")]
