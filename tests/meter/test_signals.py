"""The Meter's SIGTERM guard: the end first, then the signal goes on as it would have."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import trainpace
from trainpace.meter.signals import TermGuard

SRC = str(Path(trainpace.__file__).resolve().parents[1])


def test_the_users_own_handler_decides_and_is_put_back_at_the_end():
    seen = []

    def users(signum, frame):
        seen.append(("user", signum))

    before = signal.signal(signal.SIGTERM, users)
    try:
        guard = TermGuard(lambda: seen.append("finish"), lambda: seen.append("hurry"))
        guard.install()
        assert signal.getsignal(signal.SIGTERM) == guard._on_signal
        os.kill(os.getpid(), signal.SIGTERM)
        # it runs as without the Meter (a script that checkpoints and trains on: measured on)
        assert seen == [("user", signal.SIGTERM)]
        guard.finished()
        assert signal.getsignal(signal.SIGTERM) is users  # put back as it was
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_sigterm_during_the_end_goes_on_when_the_end_is_done():
    seen = []
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        guard = TermGuard(lambda: seen.append("finish"), lambda: seen.append("hurry"))
        guard.install()
        guard.finishing = True  # the main thread is in the Meter's end
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == ["hurry"]  # not dead: the end goes on, the signal waits for it
        # from here a second SIGTERM (or the bound's) is the default action, and finished()
        # delivers the first: checked with real processes below
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        guard._pending = None  # nothing waits: the bound's timer must not end pytest
        signal.signal(signal.SIGTERM, before)


def test_a_replaced_handler_is_left_alone():
    before = signal.getsignal(signal.SIGTERM)
    try:
        guard = TermGuard(lambda: None, lambda: None)
        guard.install()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the user's, after the Meter's
        guard.finished()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


LOOP = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import torch
    import trainpace

    meter = trainpace.Meter(sys.argv[1], window=10, warmup=1, console=False, count_flops=False)
    {open}
    for step in range(1, 100000):
        with meter.step(torch.ones(4, 2)):
            time.sleep(0.002)
        if step == 25:
            Path(sys.argv[2]).write_text("25")
""")


@pytest.mark.parametrize("with_block", [False, True])
def test_a_meter_killed_by_sigterm_reports_and_dies_of_it(tmp_path, with_block):
    """Without ``with``, nothing was printed; under ``with`` it died inside __exit__."""
    source = LOOP.format(open="meter.__enter__()" if with_block else "")
    flag = tmp_path / "flag"
    script = tmp_path / "loop.py"
    script.write_text(source)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), str(flag)],
                            env={**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM  # as it would have without trainpace
    assert "throughput" in err and "bottleneck" in err  # the report came first
    run = tmp_path / "run"
    steps = (run / "steps.jsonl").read_text().splitlines()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"]["total"] == len(steps) >= 25  # the open window included
    assert json.loads((run / "meta.json").read_text())["finished_at"] is not None
