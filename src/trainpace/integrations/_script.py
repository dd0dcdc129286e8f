"""The script that ``trainpace run`` runs: checked before anything is patched (a missing file
or module, a syntax error), then run as ``__main__`` with its own ``sys.argv`` and
``sys.path[0]``, as ``python script.py`` / ``python -m module`` would run it.

Nothing here imports torch: a bad command line is answered without waiting for it.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import io
import os
import re
import runpy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType, TracebackType

from trainpace.errors import TargetError


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, and its arguments."""

    path: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The script's file name, or the module's name."""
        return os.path.basename(self.path) if self.path is not None else str(self.module)


# What a launcher puts before the script (``py-spy record -- python train.py``):
# python, python3, python3.12, or a path to one.
_INTERPRETER = re.compile(r"python(\d+(\.\d+)?)?(\.exe)?")


def is_interpreter(word: str) -> bool:
    """Whether ``word`` names a Python interpreter rather than a script."""
    if _INTERPRETER.fullmatch(os.path.basename(word)):
        return True
    try:
        return os.path.samefile(word, sys.executable)
    except OSError:
        return False


def target_of(words: Sequence[str]) -> Target:
    """The target of ``SCRIPT ARGS``, ``-m MODULE ARGS`` or either after an interpreter
    (``python train.py``, ``python3 -m pkg.train``), as a launcher's users type them.

    Raises :class:`TargetError` (usage) for nothing to run, or for interpreter options that
    ``trainpace run`` cannot pass on.
    """
    rest = list(words)
    if rest and is_interpreter(rest[0]):
        interpreter = rest.pop(0)
        if rest and rest[0].startswith("-") and rest[0] != "-m":
            raise TargetError(f"{interpreter} {rest[0]}: interpreter options are not passed "
                              "on; type trainpace run [OPTIONS] -- SCRIPT ARGS (or -m MODULE "
                              "ARGS), and set the option in PYTHON* variables", usage=True)
    if rest and rest[0] == "-m":
        if len(rest) < 2:
            raise TargetError("-m needs a module name", usage=True)
        return Target(module=rest[1], args=tuple(rest[2:]))
    if not rest:
        raise TargetError("no script given; usage: trainpace run [OPTIONS] -- SCRIPT "
                          "[ARGS...] or trainpace run [OPTIONS] -m MODULE [ARGS...]",
                          usage=True)
    return Target(path=rest[0], args=tuple(rest[1:]))


def check_target(target: Target) -> None:
    """Raise :class:`TargetError` for a missing script or module, or one that does not compile."""
    if target.path is not None:
        path = target.path
        if not os.path.exists(path):
            raise TargetError(f"{path}: no such file; give the path of a Python script "
                              "(or -m MODULE)", usage=True)
        if os.path.isdir(path):
            raise TargetError(f"{path}: is a folder; give the path of a Python script "
                              "(or -m MODULE)", usage=True)
        try:
            with open(path, "rb") as handle:
                source = handle.read()
        except OSError as exc:
            raise TargetError(f"{path}: cannot be read ({exc.strerror or exc})",
                              usage=True) from exc
        _compile(source, path)
        return
    name = str(target.module)
    sys.path.insert(0, os.getcwd())  # where `python -m` looks first
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
            if spec is None:
                raise TargetError(f"-m {name}: a package without __main__.py; name a module "
                                  "in it", usage=True)
    except TargetError:
        raise
    except ImportError as exc:
        raise TargetError(f"-m {name}: cannot be found ({exc}); check the name and the "
                          "current folder", usage=True) from exc
    except Exception as exc:
        raise TargetError(f"-m {name}: importing its package failed ({type(exc).__name__}: "
                          f"{exc}); run `python -c 'import {name}'` to see the traceback",
                          usage=False) from exc
    finally:
        sys.path.pop(0)
    if spec is None:
        raise TargetError(f"-m {name}: no module of that name; check the name and the current "
                          "folder (or give a script path)", usage=True)
    get_source = getattr(spec.loader, "get_source", None)
    source_text = get_source(spec.name) if get_source is not None else None
    if source_text is not None:
        _compile(source_text.encode(), spec.origin or name)


def _compile(source: bytes, where: str) -> None:
    try:
        compile(source, where, "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = f":{exc.lineno}" if exc.lineno else ""
        raise TargetError(f"{exc.filename or where}{line}: the script does not compile "
                          f"({type(exc).__name__}: {exc.msg}); fix it and run again",
                          usage=False) from None
    except ValueError as exc:  # null bytes in the source
        raise TargetError(f"{where}: the script does not compile ({exc})", usage=False) from None


def run_target(target: Target) -> None:
    """Run the script or module as ``__main__`` with its own ``sys.argv`` and ``sys.path[0]``.

    Whatever the script raises (``SystemExit`` included) comes out unchanged; ``sys.argv``
    and ``sys.path`` are restored afterwards.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if target.path is not None:
            sys.argv = [target.path, *target.args]  # argv[0] as typed, as Python keeps it
            sys.path[0] = os.path.dirname(os.path.abspath(target.path))
            _run_script(os.path.abspath(target.path))
        else:
            sys.argv = [str(target.module), *target.args]  # argv[0]: the file, set by runpy
            sys.path[0] = os.getcwd()
            runpy.run_module(str(target.module), run_name="__main__", alter_sys=True)
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


def _run_script(path: str) -> None:
    """Run the file at ``path`` (absolute) as ``__main__``, as ``python script.py`` does:
    an absolute ``__file__`` (Python 3.9+) and ``sys.argv`` left as it is (``runpy.run_path``
    would make ``argv[0]`` the absolute path)."""
    with io.open_code(path) as handle:
        code = compile(handle.read(), path, "exec", dont_inherit=True)
    main = ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __package__=None, __spec__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path),
                         __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main  # pickling the script's classes finds them (spawn workers)
    try:
        exec(code, main.__dict__)  # the user's script, as python script.py runs it
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback as ``python script.py`` would print it: trainpace's and runpy's frames
    left out, wherever they are (before the script's first frame, or between the script's
    ``loss.backward()`` or ``for batch in loader`` and PyTorch's frames)."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    runpy_file = os.path.abspath(runpy.__file__)
    kept: list[TracebackType] = []
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        filename = os.path.abspath(name)
        if not (name.startswith("<frozen runpy") or filename == runpy_file
                or filename.startswith(ours)):
            kept.append(tb)
        tb = tb.tb_next
    linked: TracebackType | None = None
    for entry in reversed(kept):
        # An entry's line is None where its instruction has none (a Ctrl-C can land on one;
        # typeshed says int): -1 has the new entry find it from the instruction again.
        line: int | None = entry.tb_lineno
        linked = TracebackType(linked, entry.tb_frame, entry.tb_lasti,
                               -1 if line is None else line)
    return linked


def trimmed(exc: BaseException) -> BaseException:
    """``exc`` and the exceptions chained to it with :func:`user_frames` tracebacks."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = user_frames(current.__traceback__)
        todo += [current.__cause__, current.__context__]
    return exc
