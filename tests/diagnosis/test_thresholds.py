import dataclasses

import pytest

from trainpace.diagnosis import SOURCES, Thresholds, threshold_table
from trainpace.errors import ConfigError


def test_every_threshold_cites_its_source():
    names = {f.name for f in dataclasses.fields(Thresholds)}
    assert set(SOURCES) == names
    assert all(len(source) > 10 for source in SOURCES.values())


def test_defaults_from_the_issue_and_the_sources():
    t = Thresholds()
    assert (t.data_wait_warning_pct, t.data_wait_critical_pct) == (10.0, 20.0)
    assert t.data_wait_min_steps_critical == 20
    assert t.device_util_low_pct == 50.0
    assert t.memory_used_risk_pct == 95.0
    assert t.thermal_margin_c == 5.0
    assert t.drift_warning_pct == 10.0
    assert t.stall_factor == 3.0


def test_from_mapping_reads_text_values():
    t = Thresholds.from_mapping({"data_wait_warning_pct": "5", "drift_min_steps": "40"})
    assert t.data_wait_warning_pct == 5.0
    assert t.drift_min_steps == 40
    assert isinstance(t.drift_min_steps, int)


def test_unknown_threshold_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"threshold is not one of \[.*'data_wait_warning_pct'.*\], got 'nope'"):
        Thresholds.from_mapping({"nope": 1})


def test_bad_values_are_clear_errors():
    with pytest.raises(ConfigError, match=r"thresholds.stall_factor must be a number, got 'x'"):
        Thresholds.from_mapping({"stall_factor": "x"})
    with pytest.raises(ConfigError, match=r"thresholds.drift_min_steps must be an integer"):
        Thresholds.from_mapping({"drift_min_steps": "2.5"})
    with pytest.raises(ConfigError, match=r"data_wait_warning_pct must be ≤ thresholds.data_wait_critical_pct, got 30"):
        Thresholds(data_wait_warning_pct=30.0)
    with pytest.raises(ConfigError, match=r"must be a number ≥ 0, got -1"):
        Thresholds(thermal_margin_c=-1)
    with pytest.raises(ConfigError, match=r"spike_factor must be > 1"):
        Thresholds(spike_factor=1.0)


def test_threshold_table_rows_show_value_default_and_source():
    rows = threshold_table(Thresholds(data_wait_warning_pct=5.0))
    row = next(r for r in rows if r["name"] == "data_wait_warning_pct")
    assert row == {
        "name": "data_wait_warning_pct",
        "value": 5.0,
        "default": 10.0,
        "source": SOURCES["data_wait_warning_pct"],
    }
    assert len(rows) == len(SOURCES)
