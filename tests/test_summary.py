import json

import pytest

from trainpace.errors import RunFolderError
from trainpace.summary import SCHEMA, Diagnosis, Finding, Summary, Throughput

CONTRACT = {
    "schema", "run_id", "world_size", "steps", "throughput", "time", "data", "device",
    "bandwidth", "flops", "ranks", "diagnosis",
}


def test_every_contract_key_is_present_and_null_when_unknown():
    d = Summary().to_dict()
    assert set(d) >= CONTRACT
    assert d["schema"] == SCHEMA
    assert set(d["steps"]) >= {"total", "warmup", "measured"}
    assert set(d["throughput"]) >= {"samples_per_s", "tokens_per_s", "steps_per_s", "tokens_counted"}
    assert set(d["time"]) >= {"wall_s", "measured_s", "step_s_median", "step_s_p90", "time_to_target_s"}
    assert set(d["data"]) >= {"wait_s_per_step", "wait_pct"}
    assert set(d["device"]) >= {"kind", "name", "util_pct", "memory_used_pct", "temperature_c", "throttle_pct"}
    assert set(d["bandwidth"]) >= {"util_pct", "achieved_gb_s", "peak_gb_s", "source"}
    assert set(d["flops"]) >= {"per_step", "achieved_tflops", "mfu_pct"}
    assert set(d["diagnosis"]) >= {"bottleneck", "findings"}
    assert d["throughput"]["samples_per_s"] is None


def test_round_trip_through_json():
    s = Summary(
        run_id="r1",
        throughput=Throughput(samples_per_s=12.5, tokens_counted="all"),
        diagnosis=Diagnosis(
            bottleneck="data_loading",
            findings=[Finding(id="data_wait", severity="warning", title="t", evidence={"wait_pct": 12.0}, advice=["a"])],
        ),
    )
    back = Summary.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s


def test_unknown_keys_are_ignored_for_forward_compatibility():
    d = Summary().to_dict()
    d["future_section"] = {"x": 1}
    d["time"]["future_key"] = 3
    assert Summary.from_dict(d) == Summary()


def test_other_schema_is_a_clear_error():
    with pytest.raises(RunFolderError, match=r"x\.json: schema is 'other/2'"):
        Summary.from_dict({"schema": "other/2"}, source="x.json")


def test_missing_contract_key_is_a_clear_error():
    d = Summary().to_dict()
    del d["throughput"]
    with pytest.raises(RunFolderError, match="missing contract keys"):
        Summary.from_dict(d)
