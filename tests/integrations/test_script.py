"""What ``trainpace run`` takes as the script: as ``python`` itself would read the words."""

import sys
import traceback
from types import SimpleNamespace

import pytest

from trainpace.integrations._script import Target, TargetError, target_of, user_frames


@pytest.mark.parametrize(("words", "target"), [
    (["train.py", "--lr", "1"], Target(path="train.py", args=("--lr", "1"))),
    (["python", "train.py", "-x"], Target(path="train.py", args=("-x",))),
    (["python3.12", "train.py"], Target(path="train.py")),
    ([sys.executable, "train.py"], Target(path="train.py")),
    (["/usr/bin/python3", "-m", "pkg.train", "--e", "2"],
     Target(module="pkg.train", args=("--e", "2"))),
    (["-m", "pkg.train"], Target(module="pkg.train")),
    (["python.py"], Target(path="python.py")),  # a script that happens to be named so
])
def test_the_script_after_an_optional_interpreter(words, target):
    assert target_of(words) == target


@pytest.mark.parametrize(("words", "message"), [
    ([], "no script given"),
    (["python"], "no script given"),
    (["python", "-m"], "-m needs a module name"),
    (["python", "-u", "train.py"], "python -u: interpreter options are not passed on"),
])
def test_what_cannot_be_run_is_a_usage_error(words, message):
    with pytest.raises(TargetError, match=message) as caught:
        target_of(words)
    assert caught.value.usage


def test_a_traceback_entry_without_a_line_is_kept_and_prints():
    """A Ctrl-C can land on an instruction that has no line: its entry's ``tb_lineno`` is None
    (Python 3.11). Trimming such a traceback once raised TypeError, and ``trainpace run``
    exited 1 with its own traceback instead of dying of SIGINT."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        tb = exc.__traceback__
    assert tb is not None
    entry = SimpleNamespace(tb_frame=tb.tb_frame, tb_lasti=tb.tb_lasti, tb_lineno=None,
                            tb_next=None)
    kept = user_frames(entry)  # type: ignore[arg-type]  # a real entry's fields, line None
    assert kept is not None and kept.tb_frame is tb.tb_frame and kept.tb_next is None
    assert kept.tb_lineno == tb.tb_lineno  # found again from the instruction
    printed = "".join(traceback.format_tb(kept))
    assert "test_a_traceback_entry_without_a_line_is_kept_and_prints" in printed
