"""A trace is read in bounded time and memory whatever it holds (issue 26): the keys after
the events, one event, a run of whitespace, deep nesting, a device in place of a file."""

from __future__ import annotations

import gzip
import os

import pytest

from trainpace.errors import TraceFormatError
from trainpace.trace import stream
from trainpace.trace.load import load_trace

MB = 1 << 20


@pytest.fixture
def small_limits(monkeypatch):
    """The limits at 1 MB, so that a few MB of file crosses each."""
    for name in ("_TRAILER_LIMIT", "_EVENT_LIMIT", "_WHITESPACE_LIMIT", "_WHOLE_LIMIT"):
        monkeypatch.setattr(stream, name, MB)


def _load(path):
    return load_trace(path, memory_available=1 << 40)


def test_a_long_string_after_the_events_in_a_small_gzip_is_refused(tmp_path, small_limits):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wb") as fh:  # 4 MB of one string in a few kB of gzip
        fh.write(b'{"traceEvents": [], "x": "' + b"a" * (4 * MB) + b'"}')
    assert path.stat().st_size < 64 << 10
    with pytest.raises(TraceFormatError, match="more than 1 MB after traceEvents"):
        _load(path)


def test_a_run_of_whitespace_inside_the_events_is_refused(tmp_path, small_limits):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + b" " * (4 * MB) + b"]}")
    with pytest.raises(TraceFormatError, match="more than 1 MB of whitespace in a row at byte 17"):
        _load(path)


def test_an_event_that_never_ends_is_refused(tmp_path, small_limits):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "' + b"a" * (4 * MB) + b'"}]}')
    with pytest.raises(TraceFormatError, match="an event at byte 17 runs past 1 MB"):
        _load(path)


def test_a_document_read_whole_is_bounded(tmp_path, small_limits, monkeypatch):
    monkeypatch.setattr(stream, "_HEADER_LIMIT", MB)
    path = tmp_path / "t.json"
    path.write_bytes(b'{"x": "' + b"a" * (4 * MB) + b'", "traceEvents": []}')
    with pytest.raises(TraceFormatError, match="is larger than 1 MB, the most read whole"):
        _load(path)


@pytest.mark.parametrize("text", [
    '{"traceEvents": [], "a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"a": ' + "[" * 100_000 + "]" * 100_000 + ', "traceEvents": []}',
    '{"traceEvents": [{"ph": "X", "args": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}]}",
])
def test_deep_nesting_is_a_clear_error(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match="nested more deeply than a profiler trace is"):
        _load(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="POSIX devices")
def test_a_link_to_a_device_is_refused_by_name(tmp_path):
    path = tmp_path / "t.json"
    path.symlink_to("/dev/zero")
    with pytest.raises(TraceFormatError, match="a character device, not a regular file"):
        _load(path)


def test_a_run_meta_beside_the_trace_nested_deeply_is_not_used(tmp_path):
    from trainpace.trace.runmeta import find_run_meta

    (tmp_path / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    path, meta, problem = find_run_meta(tmp_path / "t.json")
    assert meta == {}
    assert problem == f"{path}: not read (nested too deeply); the advice is generic"
