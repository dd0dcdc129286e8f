"""What ``trainpace run`` takes as the script: as ``python`` itself would read the words."""

import sys

import pytest

from trainpace.integrations._script import Target, TargetError, target_of


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
