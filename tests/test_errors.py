"""One error hierarchy: every error class of the package lives in ``trainpace.errors`` and
derives from ``TrainpaceError``; loggers are named by their module."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import trainpace
from trainpace import errors

SOURCE = Path(trainpace.__file__).parent


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(trainpace.__path__, "trainpace."))


def test_every_error_class_lives_in_errors_and_derives_from_trainpace_error() -> None:
    elsewhere = []
    for name in _modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name or not issubclass(cls, BaseException):
                continue
            # private control flow inside one module (never raised to a caller) is allowed
            if name != "trainpace.errors" and not cls_name.startswith("_"):
                elsewhere.append(f"{name}.{cls_name}")
    assert elsewhere == []
    defined = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
               if cls.__module__ == "trainpace.errors"]
    assert {cls.__name__ for cls in defined} == set(errors.__all__)
    assert all(issubclass(cls, errors.TrainpaceError) for cls in defined)


def test_the_errors_users_catch_are_the_hierarchy() -> None:
    from trainpace.integrations._script import Target, check_target
    from trainpace.tune import DatasetError

    assert DatasetError is errors.DatasetError
    with pytest.raises(errors.TrainpaceError) as caught:
        check_target(Target(path="/nonexistent/script.py"))
    assert isinstance(caught.value, errors.TargetError) and caught.value.usage


def test_loggers_are_named_by_their_module() -> None:
    # logging.getLogger(__name__): a user silences or raises one part (trainpace.sinks, ...)
    # and every record says where it came from
    named_otherwise = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "getLogger"):
                continue
            if not node.args:  # the root logger: only the CLI, which owns the process, uses it
                if path.parent.name != "cli":
                    named_otherwise.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
            elif not (isinstance(node.args[0], ast.Name) and node.args[0].id == "__name__"):
                named_otherwise.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    assert named_otherwise == []
