from __future__ import annotations

import gzip
import sys
import threading
from pathlib import Path

import pytest
from tracekit import HANDMADE

from trainpace.errors import TraceFormatError
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


def test_reading_starts_no_thread_and_leaves_the_switch_interval_alone(
        tmp_path: Path) -> None:
    # a library call changes no process-wide state: the caller's threads (its training) keep
    # the switch interval they had; a gzip trace of any size is inflated in the reading thread
    before, threads = sys.getswitchinterval(), threading.active_count()
    big = _gzip_trace(tmp_path, "big.json.gz", HANDMADE.read_bytes() + b" " * (4 << 20))
    small = _gzip_trace(tmp_path, "small.json.gz", HANDMADE.read_bytes())
    for path, content in ((big, HANDMADE.read_bytes() + b" " * (4 << 20)),
                          (small, HANDMADE.read_bytes()), (str(HANDMADE), HANDMADE.read_bytes())):
        with Source(path) as src:
            assert _read_all(src) == content
            assert threading.active_count() == threads
    assert sys.getswitchinterval() == before


def test_a_damaged_gzip_is_a_trace_format_error(tmp_path: Path) -> None:
    data = gzip.compress(HANDMADE.read_bytes())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="damaged or truncated"), Source(str(path)) as src:
        _read_all(src)
