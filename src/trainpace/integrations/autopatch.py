"""Metering a script that knows nothing of trainpace (``trainpace run``).

:class:`AutoPatch` drives a :class:`~trainpace.Meter` through its public API from hooks that
PyTorch calls anyway, so the figures are the Meter's own:

- **batches**: ``torch.utils.data.DataLoader.__iter__`` is replaced while installed, and each
  DataLoader iterated with gradients enabled goes through ``meter.loader`` (the wait per batch,
  samples and tokens counted from what it yields). A wrapper the script puts around a
  DataLoader iterates it, so it is covered too. A DataLoader iterated under ``torch.no_grad()``
  or ``torch.inference_mode()`` is taken for evaluation and left alone;
- **step boundaries**: the optimizer step hooks (``register_optimizer_step_pre_hook`` /
  ``post_hook``, global: every optimizer calls them). A step opens at the first sign of
  training after the previous optimizer step (a module's forward with gradients on, a
  ``backward()``, the optimizer's own step) and closes when the *first optimizer that ever
  stepped* finishes its ``step()``; the batches pulled in between are its micro-batches, so
  gradient accumulation is inferred. With several optimizers (a GAN) the others step inside;
- **the loss**: the scalar tensor passed to ``backward()`` (``torch.autograd.backward``, which
  ``Tensor.backward`` calls), handed to ``meter.observe(loss=...)``: kept on the device, read at
  the window boundary, never synchronized.

Everything is undone by :meth:`AutoPatch.remove`. A failure of ours inside a hook is logged
once (logger ``trainpace``) and the script goes on.

Running the script itself (``runpy`` as ``__main__``, its ``sys.argv`` and ``sys.path[0]``)
is :func:`run_target`; :func:`check_target` finds a missing file, module or a syntax error
before anything is patched.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import runpy
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.autograd
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer
from torch.utils.data import DataLoader

from trainpace.summary import Finding

if TYPE_CHECKING:
    from trainpace.meter import Meter

logger = logging.getLogger("trainpace")


class _StepMarker:
    """Counted at the end of a step that pulled no batch: ``--samples-per-step`` needs one."""

    __slots__ = ()


STEP_MARKER = _StepMarker()


class PerStep:
    """``Meter(samples=...)`` / ``tokens=`` for a count given per optimizer step: the first
    batch counted in a step (or the step's marker, when it pulled none) carries all of it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.counted = False

    def __call__(self, batch: Any) -> int:
        if self.counted:
            return 0
        self.counted = True
        return self.count


class AutoPatch:
    """Meters whatever training runs while installed (``with AutoPatch(meter):``).

    ``samples_per_step`` / ``tokens_per_step``: the counts of each optimizer step, for a
    script that pulls no batch from a DataLoader; the same objects must be given to the
    Meter as ``samples=`` / ``tokens=`` (:meth:`counters` makes them).
    """

    def __init__(self, meter: Meter, *, samples: PerStep | None = None,
                 tokens: PerStep | None = None) -> None:
        self.meter = meter
        self._samples = samples
        self._tokens = tokens
        self._marker = STEP_MARKER if samples is not None or tokens is not None else None
        self._context: Any = None  # the open meter.step() context, or None
        self._pacer: int | None = None  # id() of the optimizer whose step() ends a step
        self._handles: list[Any] = []
        self._forward_handle: Any = None
        self._original_iter: Callable[[Any], Iterator[Any]] | None = None
        self._original_backward: Callable[..., Any] | None = None
        self._faults: set[str] = set()
        self._entering = False
        # What was seen, for the report's "what trainpace run could not see".
        self.optimizer_steps = 0
        self.optimizers: dict[int, str] = {}  # id -> class name, in the order they stepped
        self.loaders_metered = 0
        self.loaders_skipped = 0  # iterated under no_grad: taken for evaluation
        self.backward_calls = 0

    @staticmethod
    def counters(samples_per_step: int | None,
                 tokens_per_step: int | None) -> tuple[PerStep | None, PerStep | None]:
        """The ``samples=`` / ``tokens=`` overrides for per-step counts (None: counted)."""
        return (PerStep(samples_per_step) if samples_per_step is not None else None,
                PerStep(tokens_per_step) if tokens_per_step is not None else None)

    # -- install / remove -----------------------------------------------------------------

    def install(self) -> None:
        """Patch DataLoader iteration and backward(); register the optimizer step hooks."""
        original_iter = DataLoader.__iter__
        self._original_iter = original_iter
        patch = self

        def __iter__(loader: DataLoader[Any]) -> Iterator[Any]:  # noqa: N807 - the patched dunder
            return patch._iterate(loader)

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign,assignment]
        self._original_backward = torch.autograd.backward
        torch.autograd.backward = self._backward
        self._handles = [
            _optimizer.register_optimizer_step_pre_hook(self._pre_step),
            _optimizer.register_optimizer_step_post_hook(self._post_step),
        ]
        self._arm_forward()

    def remove(self) -> None:
        """Undo everything; a step left open (the script ended inside one) is not counted."""
        if self._original_iter is not None:
            DataLoader.__iter__ = self._original_iter  # type: ignore[method-assign,assignment]
            self._original_iter = None
        if self._original_backward is not None:
            torch.autograd.backward = self._original_backward
            self._original_backward = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._disarm_forward()
        if self._context is not None:
            context, self._context = self._context, None
            # An unfinished step: closed as failed, so it is not counted as a step.
            self._contained("ending the last step", context.__exit__, RuntimeError,
                            RuntimeError("the script ended inside a step"), None)

    def __enter__(self) -> AutoPatch:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- the hooks (hot path) -------------------------------------------------------------

    def _iterate(self, loader: DataLoader[Any]) -> Iterator[Any]:
        original = self._original_iter
        if original is None:  # removed while a reference to the patched method lived on
            return DataLoader.__iter__(loader)
        if self._entering:  # meter.loader's own iter() of this DataLoader
            return original(loader)
        if not torch.is_grad_enabled():
            self.loaders_skipped += 1
            return original(loader)
        self.loaders_metered += 1
        try:
            metered = self.meter.loader(loader)  # its settings are read from the DataLoader
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("wrapping a DataLoader", exc)
            return original(loader)
        # The wrapper's iter() calls DataLoader.__iter__ again (that is timed: workers start
        # there); this time it must reach the original.
        self._entering = True
        try:
            return iter(metered)
        finally:
            self._entering = False

    def _open(self) -> None:
        """Open a step (the first sign of training since the last optimizer step)."""
        self._disarm_forward()
        try:
            context = self.meter.step(self._marker)
            context.__enter__()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("starting a step", exc)
            return
        self._context = context

    def _close(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            self._contained("ending a step", context.__exit__, None, None, None)
        if self._samples is not None:
            self._samples.counted = False
        if self._tokens is not None:
            self._tokens.counted = False
        self._arm_forward()

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        # Registered only while no step is open: one call per step, not one per module.
        if self._context is None and torch.is_grad_enabled():
            self._open()

    def _backward(self, tensors: Any, *args: Any, **kwargs: Any) -> Any:
        original = self._original_backward
        if original is None:
            return torch.autograd.backward(tensors, *args, **kwargs)
        self.backward_calls += 1
        if self._context is None:
            self._open()
        if type(tensors) is torch.Tensor or isinstance(tensors, torch.Tensor):
            try:
                if tensors.numel() == 1:  # a loss; a vector-Jacobian product is not one
                    self.meter.observe(loss=tensors)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._fault("keeping the loss", exc)
        return original(tensors, *args, **kwargs)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        key = id(optimizer)
        if self._pacer is None:
            self._pacer = key
        if key not in self.optimizers:
            self.optimizers[key] = type(optimizer).__name__
        if self._context is None:
            self._open()

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if id(optimizer) == self._pacer:
            self.optimizer_steps += 1
            self._close()

    def _arm_forward(self) -> None:
        if self._forward_handle is None:
            self._forward_handle = _module.register_module_forward_pre_hook(self._forward_pre)

    def _disarm_forward(self) -> None:
        if self._forward_handle is not None:
            self._forward_handle.remove()
            self._forward_handle = None

    def _contained(self, where: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault(where, exc)

    def _fault(self, where: str, exc: BaseException) -> None:
        if where in self._faults:
            return
        self._faults.add(where)
        logger.warning("trainpace: %s failed (%s: %s); the script goes on, the figures may "
                       "miss it", where, type(exc).__name__, exc)

    # -- what was seen --------------------------------------------------------------------

    @property
    def pacer(self) -> str | None:
        """Class name of the optimizer whose ``step()`` marks the steps (None before one)."""
        return self.optimizers.get(self._pacer) if self._pacer is not None else None

    @property
    def samples_given(self) -> bool:
        """Whether the samples of a step were given (``--samples-per-step``)."""
        return self._samples is not None

    @property
    def tokens_given(self) -> bool:
        """Whether the tokens of a step were given (``--tokens-per-step``)."""
        return self._tokens is not None

    @property
    def saw_batches(self) -> bool:
        """Whether any training DataLoader was metered (or the counts were given)."""
        return self.loaders_metered > 0

    def blind_spots(self) -> list[Finding]:
        """What could not be seen, and why, as findings for the report (empty: all seen)."""
        out: list[Finding] = []
        if self.optimizer_steps == 0:
            out.append(Finding(
                id="run_no_optimizer_step", severity="warning",
                title="No optimizer step was seen: there are no step boundaries, so no step "
                      "times, throughput or data wait",
                evidence={"optimizer_steps": 0, "backward_calls": self.backward_calls,
                          "dataloaders_iterated": self.loaders_metered},
                advice=["trainpace run marks a step at each torch.optim optimizer's step(); a "
                        "script that updates its weights another way can use trainpace.Meter "
                        "in its loop (with meter.step(): ...)"],
            ))
        if self.loaders_metered == 0 and self._samples is None:
            advice = ["pass --samples-per-step N (and --tokens-per-step N) to give the counts "
                      "of one optimizer step"]
            if self.loaders_skipped:
                advice.insert(0, "only DataLoaders iterated under torch.no_grad() were seen; "
                              "they are taken for evaluation and not metered")
            out.append(Finding(
                id="run_no_dataloader", severity="info",
                title="No torch.utils.data.DataLoader was iterated for training: samples, "
                      "tokens and data wait are unknown",
                evidence={"dataloaders_iterated": 0,
                          "dataloaders_under_no_grad": self.loaders_skipped},
                advice=advice,
            ))
        if len(self.optimizers) > 1:
            names = list(self.optimizers.values())
            out.append(Finding(
                id="run_several_optimizers", severity="info",
                title=f"{len(names)} optimizers stepped; the first one, {names[0]}, marks the "
                      "steps",
                evidence={"optimizers": names, "steps_marked_by": names[0]},
                advice=["the other optimizers' steps are inside each step: the step time is "
                        "one full iteration of all of them"],
            ))
        return out


# -- the script -----------------------------------------------------------------------------


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


class TargetError(Exception):
    """A script or module that cannot be run. ``usage``: the command line named something that
    does not exist (exit 2); else its content is at fault (a syntax error; exit 1)."""

    def __init__(self, message: str, *, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage


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
    except ImportError as exc:
        raise TargetError(f"-m {name}: cannot be found ({exc}); check the name and the "
                          "current folder", usage=True) from exc
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


def user_frames(tb: Any) -> Any:
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
