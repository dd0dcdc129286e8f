"""Fuzzing the loader: whatever the bytes, nothing escapes but TraceFormatError, and what
loads can be analyzed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracekit import HANDMADE

from trainpace.errors import TraceFormatError
from trainpace.trace.analyze import analyze_columns
from trainpace.trace.load import load_trace

FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
SOURCE = HANDMADE.read_bytes()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "trace.json"


def _load_and_analyze(path: Path, data: bytes, chunk: int = 96) -> None:
    path.write_bytes(data)
    try:
        cols = load_trace(path, chunk_bytes=chunk)
    except TraceFormatError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert str(path) in message
        return
    analysis = analyze_columns(cols, gap_threshold_us=1.0)
    json.dumps(analysis.to_dict(), default=str)


@pytest.mark.slow
@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(scratch: Path, data: bytes) -> None:
    _load_and_analyze(scratch, data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@FUZZ
@given(json_values)
def test_any_json_document(scratch: Path, doc: Any) -> None:
    _load_and_analyze(scratch, json.dumps(doc).encode())


@pytest.mark.slow
@FUZZ
@given(st.integers(0, len(SOURCE)), st.booleans())
def test_truncated_anywhere(scratch: Path, cut: int, compress: bool) -> None:
    data = SOURCE[:cut]
    _load_and_analyze(scratch, gzip.compress(data) if compress else data)


@pytest.mark.slow
@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SOURCE) - 1), st.integers(0, 255)), min_size=1,
                max_size=4))
def test_damaged_bytes(scratch: Path, edits: list[tuple[int, int]]) -> None:
    data = bytearray(SOURCE)
    for at, value in edits:
        data[at] = value
    _load_and_analyze(scratch, bytes(data))


@pytest.mark.slow
@FUZZ
@given(st.integers(10, len(SOURCE) * 2), st.integers(0, 2**32 - 1))
def test_damaged_gzip(scratch: Path, at: int, value: int) -> None:
    data = bytearray(gzip.compress(SOURCE))
    data[at % len(data)] = value % 256
    if at > len(data):
        data = data[: at % len(data)]
    _load_and_analyze(scratch, bytes(data))


names = st.sampled_from([
    "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#x", "volta_sgemm_128x64_nn",
    "ncclKernel_AllReduce", "Memcpy HtoD", "Context Sync", "cudaLaunchKernel",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "aten::mm", "",
    "cudaDeviceSynchronize", "Optimizer.step#SGD.step",
])
cats = st.sampled_from(["kernel", "Kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime",
                        "Runtime", "cpu_op", "user_annotation", "python_function",
                        "gpu_user_annotation", "Trace", "cuda_driver", "weird"])
numbers = st.one_of(st.integers(-5, 400), st.floats(-5, 400, allow_nan=False),
                    st.sampled_from([0, 2**40, 2**70, "7", None, True, [1]]))
events = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "M", "s"]), "cat": cats, "name": names,
     "ts": numbers, "dur": numbers},
    optional={"args": st.fixed_dictionaries(
        {}, optional={"stream": numbers, "correlation": st.integers(-2, 6) | numbers,
                      "External id": st.integers(-1, 4), "device": st.integers(-1, 2)}),
        "pid": numbers, "tid": numbers},
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events, max_size=40), st.dictionaries(st.sampled_from(
    ["distributedInfo", "deviceProperties", "schemaVersion"]), json_values, max_size=3))
def test_random_event_streams_load_and_analyze(scratch: Path, evs: list[dict[str, Any]],
                                               meta: dict[str, Any]) -> None:
    _load_and_analyze(scratch, json.dumps({**meta, "traceEvents": evs}).encode(), chunk=64)


def _columns(path: Path, data: bytes, chunk: int) -> tuple[Any, ...] | None:
    path.write_bytes(data)
    try:
        cols = load_trace(path, chunk_bytes=chunk)
    except TraceFormatError as exc:
        message = str(exc)
    else:
        names = [cols.names[i] for i in cols.name]
        return names, cols.ts.tolist(), cols.dur.tolist(), cols.stream.tolist(), cols.skipped, cols.meta
    assert str(path) in message
    return None


@pytest.mark.slow
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events, max_size=12), st.dictionaries(st.text(max_size=6), json_values, max_size=3),
       st.dictionaries(st.text(max_size=6), json_values, max_size=3), st.integers(64, 400),
       st.booleans())
def test_keys_after_the_events_read_as_the_stdlib_does(
        scratch: Path, evs: list[dict[str, Any]], before: dict[str, Any],
        after: dict[str, Any], chunk: int, indent: bool) -> None:
    # Keys may follow traceEvents; whatever they hold, the events and the keys are read as
    # json.loads reads the document, at any piece size.
    before.pop("traceEvents", None)
    after.pop("traceEvents", None)
    doc = {**before, "traceEvents": evs, **{k: v for k, v in after.items() if k not in before}}
    data = json.dumps(doc, indent=2 if indent else None).encode()
    got = _columns(scratch, data, chunk)
    events_first = _columns(scratch, json.dumps({"traceEvents": evs}).encode(), 1 << 20)
    if events_first is None:  # no complete event: both say so
        assert got is None
        return
    assert got is not None
    expected_meta = json.loads(data)
    del expected_meta["traceEvents"]
    assert got[:5] == events_first[:5]
    assert got[5] == expected_meta
