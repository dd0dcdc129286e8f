"""A trace read ahead in a forked child (what `trainpace analyze` does while it imports)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from tracekit import HANDMADE, SAMPLED

from trainpace.errors import TraceFormatError
from trainpace.trace import prefetch
from trainpace.trace.load import TraceColumns, read_trace

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="read ahead only where the system forks natively")
FIELDS = ("name", "cat", "ts", "dur", "end", "stream", "correlation", "external_id", "device",
          "thread")


@pytest.fixture(autouse=True)
def _nothing_left_pending(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(prefetch, "HEAD_START_MIN_BYTES", 0)  # the small traces here too
    yield
    leftover = list(prefetch._pending)
    prefetch.cancel_all()
    assert not leftover, f"read ahead but never taken: {leftover}"


def _same(a: TraceColumns, b: TraceColumns) -> None:
    assert (a.names, a.cats, a.meta, a.events_total, a.skipped, a.rounded_to_us) == \
        (b.names, b.cats, b.meta, b.events_total, b.skipped, b.rounded_to_us)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


@pytest.mark.parametrize("path", [SAMPLED[0], HANDMADE])
def test_what_is_read_ahead_is_what_a_read_gives(path: Path) -> None:
    prefetch.start([str(path)])
    assert os.path.realpath(path) in prefetch._pending
    ahead = read_trace(str(path))  # takes the child's columns
    assert not prefetch._pending
    _same(ahead, read_trace(str(path)))  # read here


def test_the_childs_error_is_raised_word_for_word(
        write_trace: Callable[..., Path]) -> None:
    bad = write_trace(b'{"traceEvents": [{"ph": "X", "cat": "k", "name": "a", "ts": 1 "dur": 1}]}')
    with pytest.raises(TraceFormatError) as direct:
        read_trace(str(bad))
    prefetch.start([str(bad)])
    with pytest.raises(TraceFormatError) as ahead:
        read_trace(str(bad))
    assert str(ahead.value) == str(direct.value)


def test_a_child_that_dies_leaves_the_read_to_the_parent() -> None:
    path = str(SAMPLED[1])
    prefetch.start([path])
    os.kill(prefetch._pending[os.path.realpath(path)].pid, 9)  # as if it ran out of memory
    assert prefetch.take(path) is None  # nothing said: the caller reads the file itself
    _same(read_trace(path), read_trace(path))


def test_a_path_spelled_otherwise_is_taken() -> None:
    path = str(SAMPLED[0])
    prefetch.start([os.path.join(os.path.dirname(path), ".", os.path.basename(path))])
    assert prefetch.take(path) is not None


def test_a_small_trace_is_read_in_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # forking and handing over would cost about as much as reading it
    monkeypatch.setattr(prefetch, "HEAD_START_MIN_BYTES", 8 << 20)
    prefetch.start([str(SAMPLED[0])])  # 1.8 MB of JSON
    assert prefetch._pending == {}


def test_only_one_regular_file_is_read_ahead(tmp_path: Path) -> None:
    prefetch.start([str(p) for p in SAMPLED])  # two ranks: a process pool reads them
    prefetch.start([str(tmp_path)])  # a folder
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    prefetch.start([str(fifo)])  # a FIFO can be read once: by the analysis
    prefetch.start([str(tmp_path / "missing.json")])  # the analysis says it is missing
    assert prefetch._pending == {}


def test_a_read_ahead_not_taken_is_stopped() -> None:
    path = str(SAMPLED[0])
    prefetch.start([path])
    pid = prefetch._pending[os.path.realpath(path)].pid
    prefetch.cancel_all()
    assert prefetch._pending == {}
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(pid, 0)


def test_reading_ahead_needs_no_numpy() -> None:
    # the point of the head start: the child reads while the parent imports numpy
    import subprocess

    code = ("import sys; from trainpace.trace import prefetch; "
            "print('numpy' in sys.modules, 'trainpace.trace.analyze' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "False"]
