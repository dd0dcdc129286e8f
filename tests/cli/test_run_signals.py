"""Where trainpace run may raise the SIGTERM exception into the script (real frames), and
how it ends as the script would have."""

import multiprocessing.util
import signal
import sys

import trainpace.integrations._script as script
from trainpace.cli._run_signals import exit_status, raising_is_safe


def test_the_script_s_own_frames_take_the_exception():
    assert raising_is_safe(sys._getframe())


def test_a_finalizer_or_multiprocessing_does_not():
    seen = []

    class Finalized:
        def __del__(self):
            seen.append(raising_is_safe(sys._getframe()))

    Finalized()  # collected at once: __del__ runs here
    multiprocessing.util.Finalize(None, lambda: seen.append(raising_is_safe(sys._getframe())),
                                  exitpriority=1)()
    assert seen == [False, False]


def test_a_traceback_that_cannot_be_trimmed_is_printed_whole_and_the_end_is_the_scripts(
        monkeypatch, capsys):
    def broken(exc):
        raise TypeError("cannot trim")

    monkeypatch.setattr(script, "trimmed", broken)
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        interrupted = exc
    assert exit_status(interrupted) == (128 + signal.SIGINT, signal.SIGINT)
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "KeyboardInterrupt" in err
    assert "cannot trim" not in err
