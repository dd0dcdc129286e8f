"""Fuzzing the trace reader: whatever a trace file holds, ``analyze`` ends with 0 or 1 and a
message, never a traceback (issue 26)."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fuzz.conftest import FUZZ, captured
from fuzz.test_run_folder import JSON, NUMBERS, TEXT
from trainpace.cli import main

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
HANDMADE = json.loads((TRACES / "handmade_steps.json").read_text())
FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")


@st.composite
def traces(draw: st.DrawFn) -> bytes:
    """The hand-made trace with some events' fields replaced by anything, maybe cut, maybe
    with bytes flipped, maybe gzipped."""
    doc: dict[str, Any] = json.loads(json.dumps(HANDMADE))
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(0, 6))):
        event = events[draw(st.integers(0, len(events) - 1))]
        field = draw(st.sampled_from(FIELDS))
        event[field] = draw(st.one_of(NUMBERS, TEXT, JSON))
    if draw(st.booleans()):
        doc[draw(TEXT)] = draw(JSON)
    data = json.dumps(doc).encode()
    mutation = draw(st.integers(0, 3))
    if mutation == 1:
        data = data[:draw(st.integers(0, len(data)))]
    elif mutation == 2:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at + 1:]
    if draw(st.booleans()):
        data = gzip.compress(data, compresslevel=1)
        if draw(st.integers(0, 4)) == 0:
            data = data[:draw(st.integers(0, len(data)))]
    return data


@FUZZ
@given(traces())
def test_analyze_of_any_trace_ends_with_0_or_1(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t.json.gz" if data[:2] == b"\x1f\x8b" else "t.json")
        path.write_bytes(data)
        with captured() as (out, err):
            code = main(["analyze", str(path), "--json"])
        assert code in (0, 1), err.getvalue()
        if code == 0:
            json.loads(out.getvalue())
        else:
            assert err.getvalue().startswith("trainpace analyze: error: ")
