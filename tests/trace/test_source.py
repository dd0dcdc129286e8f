from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest
from tracekit import HANDMADE

from trainpace.errors import TraceFormatError
from trainpace.trace import source
from trainpace.trace.source import Source


def _gzip_trace(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(gzip.compress(data))
    return str(path)


def _read_all(src: Source) -> bytes:
    blocks = []
    while block := src.read(1 << 16):
        blocks.append(block)
    return b"".join(blocks)


def test_reading_leaves_the_interpreter_switch_interval_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a library call changes no process-wide state: the caller's threads (its training) keep
    # the switch interval they had, while a gunzip thread runs and after it
    monkeypatch.setattr(source, "_THREAD_MIN_BYTES", 0)
    before = sys.getswitchinterval()
    first = _gzip_trace(tmp_path, "a.json.gz", HANDMADE.read_bytes())
    second = _gzip_trace(tmp_path, "b.json.gz", HANDMADE.read_bytes())
    with Source(first) as a:
        assert a._gunzip is not None
        with Source(second) as b:
            assert sys.getswitchinterval() == before
            assert _read_all(b) == HANDMADE.read_bytes()
        assert _read_all(a) == HANDMADE.read_bytes()
    assert sys.getswitchinterval() == before


def test_a_damaged_file_in_a_gunzip_thread_is_a_trace_format_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "_THREAD_MIN_BYTES", 0)
    data = gzip.compress(HANDMADE.read_bytes())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="damaged or truncated"), Source(str(path)) as src:
        _read_all(src)


def test_a_small_file_or_plain_json_starts_no_thread(tmp_path: Path) -> None:
    # a small gzip is inflated inline (a few ms of zlib), a plain file read as it is
    small = _gzip_trace(tmp_path, "small.json.gz", HANDMADE.read_bytes())
    for path in (small, str(HANDMADE)):
        with Source(path) as src:
            assert src._gunzip is None
            assert _read_all(src) == HANDMADE.read_bytes()
