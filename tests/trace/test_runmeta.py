"""A trace the Meter recorded is read with its run's meta.json: advice about that run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tracekit import CPU_RUN, CPU_RUN_TRACE

from trainpace.trace import analyze_traces
from trainpace.trace.runmeta import find_run_meta


def _data_wait(analysis):  # type: ignore[no-untyped-def]
    return next(f for f in analysis.findings if f.id == "data_wait")


def test_meter_trace_is_read_with_the_run_meta() -> None:
    analysis = analyze_traces([CPU_RUN_TRACE])
    meta_path = str((CPU_RUN / "meta.json").resolve())
    assert analysis.run_meta == meta_path
    assert analysis.to_dict()["run_meta"] == meta_path
    meta = json.loads((CPU_RUN / "meta.json").read_text())
    assert analysis.summary.data.loader == meta["loader"]
    assert analysis.summary.device.kind == "cpu" and analysis.summary.device.name == \
        meta["device"]["name"]
    finding = _data_wait(analysis)
    assert finding.evidence["loader"]["num_workers"] == 0
    advice = " ".join(finding.advice)
    assert "meter.loader" not in advice  # the Meter wrapped it: it knows the settings
    assert "num_workers=0" in advice  # what the run used, from meta.json
    assert any(meta_path in n for n in analysis.notes)


def test_a_trace_outside_a_run_folder_gets_the_generic_advice(tmp_path: Path) -> None:
    lone = tmp_path / "a" / "b" / "trace.json.gz"
    lone.parent.mkdir(parents=True)
    shutil.copy(CPU_RUN_TRACE, lone)
    analysis = analyze_traces([lone])
    assert analysis.run_meta is None and analysis.summary.data.loader is None
    assert "meter.loader" in " ".join(_data_wait(analysis).advice)


def test_meta_json_of_another_tool_is_ignored_and_a_broken_one_is_said(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "profile").mkdir(parents=True)
    trace = run / "profile" / "t.json.gz"
    shutil.copy(CPU_RUN_TRACE, trace)
    (run / "meta.json").write_text(json.dumps({"loader": {"num_workers": 7}}))
    assert find_run_meta(trace) == (None, {}, None)
    (run / "meta.json").write_text("{not json")
    path, meta, problem = find_run_meta(trace)
    assert path == str((run / "meta.json").resolve()) and meta == {}
    assert problem is not None and "not read" in problem
    analysis = analyze_traces([trace])
    assert analysis.run_meta is None and any("not read" in n for n in analysis.notes)


def test_meta_beside_the_trace_counts_too(tmp_path: Path) -> None:
    shutil.copy(CPU_RUN_TRACE, tmp_path / "t.json.gz")
    shutil.copy(CPU_RUN / "meta.json", tmp_path / "meta.json")
    path, meta, problem = find_run_meta(tmp_path / "t.json.gz")
    assert path == str((tmp_path / "meta.json").resolve()) and meta["loader"]["num_workers"] == 0
    assert problem is None
