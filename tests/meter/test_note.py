"""Meter.note: what a front-end measured about the run, kept in meta.json for the diagnosis."""

import json
import logging

import trainpace


def test_a_note_reaches_meta_json_and_the_diagnosis(tmp_path):
    meter = trainpace.Meter(tmp_path / "run", window=2, warmup=0, console=False, report=False,
                            count_flops=False)
    for i in meter.loader(range(4)):
        with meter.step([i]):
            pass
    facts = {"name": "lightning", "steps": 4, "work_s_per_step": 0.0024,
             "step_s_mean": 0.0077, "work_pct": 31.0}
    meter.note("framework", facts)
    summary = meter.finish()
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["framework"] == facts
    found = {f.id: f for f in summary.diagnosis.findings}
    assert found["framework_work"].evidence["work_pct"] == 31.0


def test_a_note_never_overwrites_the_meters_own_meta(tmp_path, caplog):
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False, count_flops=False)
    with caplog.at_level(logging.WARNING):
        meter.note("config", {"window": 1})
    meter.finish()
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["config"]["window"] != 1
    assert "the Meter's own" in caplog.text
