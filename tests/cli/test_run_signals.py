"""Where trainpace run may raise the SIGTERM exception into the script (real frames)."""

import multiprocessing.util
import sys

from trainpace.cli._run_signals import raising_is_safe


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
