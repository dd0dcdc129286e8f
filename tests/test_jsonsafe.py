"""json_safe: the one clean-up of values for strict JSON (printed results, meta.json's settings)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from trainpace.jsonsafe import json_safe
from trainpace.units import number_or_none


def _factory() -> None:
    pass


class _Odd:
    def __repr__(self) -> str:
        return "<odd>"


def test_every_kind_of_value_becomes_strict_json() -> None:
    value = {"nan": math.nan, "inf": [math.inf, -math.inf, 1.5], 3: (1, "a", None, True),
             "path": Path("/runs/exp1"), "factory": _factory, "other": _Odd()}
    assert json_safe(value) == {
        "nan": None, "inf": [None, None, 1.5], "3": [1, "a", None, True], "path": "/runs/exp1",
        "factory": "test_jsonsafe._factory", "other": "<odd>"}
    json.dumps(json_safe(value), allow_nan=False)  # strict: no NaN, nothing unknown


def test_the_meter_settings_are_written_with_it() -> None:
    from trainpace.config import MeterConfig

    meta = MeterConfig(out="runs/x", profile_steps=[3, 5]).meta()
    # resolved when the settings are made: a later os.chdir cannot move the run folder
    assert meta["out"] == os.path.join(os.getcwd(), "runs", "x")
    assert meta["profile_steps"] == [3, 5]
    json.dumps(meta, allow_nan=False)


def test_number_or_none() -> None:
    assert [number_or_none(v) for v in (1, 2.5, True, "3", None, math.nan, math.inf, 10**400)] \
        == [1.0, 2.5, None, None, None, None, None, None]
