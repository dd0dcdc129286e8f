"""The script that ``trainpace run`` runs: checked before anything is patched (a missing file
or module, a syntax error), then run as ``__main__`` with its own ``sys.argv`` and
``sys.path[0]``, as ``python script.py`` / ``python -m module`` would run it.

Nothing here imports torch: a bad command line is answered without waiting for it.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from dataclasses import dataclass
from types import TracebackType

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
            sys.argv = [target.path, *target.args]
            sys.path[0] = os.path.dirname(os.path.abspath(target.path))
            # An absolute __file__, as `python script.py` gives since Python 3.9.
            runpy.run_path(os.path.abspath(target.path), run_name="__main__")
        else:
            sys.argv = [str(target.module), *target.args]  # argv[0]: the file, set by runpy
            sys.path[0] = os.getcwd()
            runpy.run_module(str(target.module), run_name="__main__", alter_sys=True)
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the script's first frame on (ours and runpy's left out), as
    ``python script.py`` would print it."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    runpy_file = os.path.abspath(runpy.__file__)
    while tb is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
        frozen = tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")
        if not frozen and filename != runpy_file and not filename.startswith(ours):
            break
        tb = tb.tb_next
    return tb
