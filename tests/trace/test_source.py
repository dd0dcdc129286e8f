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


def test_the_switch_interval_is_short_while_a_gunzip_thread_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # behind a busy parser the thread waits a whole switch interval for the GIL each time zlib
    # gives it back; while it runs the interval is short, and afterwards as it was
    monkeypatch.setattr(source, "_THREAD_MIN_BYTES", 0)
    before = sys.getswitchinterval()
    first = _gzip_trace(tmp_path, "a.json.gz", HANDMADE.read_bytes())
    second = _gzip_trace(tmp_path, "b.json.gz", HANDMADE.read_bytes())
    with Source(first) as a:
        assert sys.getswitchinterval() == pytest.approx(source._SWITCH_INTERVAL_S)
        with Source(second) as b:  # two traces at once: restored once, after the last
            assert _read_all(b) == HANDMADE.read_bytes()
        assert sys.getswitchinterval() == pytest.approx(source._SWITCH_INTERVAL_S)
        assert _read_all(a) == HANDMADE.read_bytes()
    assert sys.getswitchinterval() == before


def test_the_switch_interval_is_restored_after_a_damaged_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "_THREAD_MIN_BYTES", 0)
    before = sys.getswitchinterval()
    data = gzip.compress(HANDMADE.read_bytes())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="damaged or truncated"), Source(str(path)) as src:
        _read_all(src)
    assert sys.getswitchinterval() == before


def test_a_small_file_or_plain_json_starts_no_thread(tmp_path: Path) -> None:
    # a small gzip is inflated inline (a few ms of zlib), a plain file read as it is: neither
    # changes the interpreter's switch interval
    before = sys.getswitchinterval()
    small = _gzip_trace(tmp_path, "small.json.gz", HANDMADE.read_bytes())
    for path in (small, str(HANDMADE)):
        with Source(path) as src:
            assert sys.getswitchinterval() == before
            assert _read_all(src) == HANDMADE.read_bytes()
