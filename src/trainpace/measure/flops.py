"""FLOPs and bytes moved by one training step, counted once, per op family.

The step runs under one dispatch mode of ours that sees every ATen op and tallies
(:mod:`trainpace.measure.op_costs` says what an op costs):

- the FLOPs of PyTorch's own formulas (``torch.utils.flop_counter``'s registry, the one its
  ``FlopCounterMode`` applies: matmuls, convolutions, attention), with the arguments and
  output FlopCounterMode gives them; an op that PyTorch can decompose (its
  CompositeImplicitAutograd kernel) runs as its parts, whose FLOPs are its own, as
  FlopCounterMode counts it. Attributed to the op's family and to the dtype it computed in
  (float32 matmuls on CUDA count as ``tf32`` when PyTorch allows it);
- the bytes it reads and writes: every distinct tensor input plus every output, at the size
  the op touches (a view counts its own elements, a broadcast input its distinct ones); views
  and allocations move nothing. This is the traffic of an unfused execution with no cache
  reuse: close to DRAM traffic for large tensors on a GPU, an overstatement when tensors fit
  in a cache or kernels are fused (``torch.compile``).

Only ops with a FLOP formula have FLOPs (elementwise ops count 0), which is what model FLOPs
utilization means. Counting never raises into the step: a failure of ours leaves the
result ``None``, logged once; an exception from the step itself propagates unchanged.

Counting costs tens of microseconds per op, so it is bounded: a step whose ops have taken
:data:`BUDGET_S` of CPU time under counting without the step ending (a loop without an
optimizer step, whose "first step" never ends) stops counting on its own, at the next op or
module call, and its FLOPs are unknown. The CPU time of the ops themselves, not wall time:
other processes taking the CPU, and what the loop does between ops (compiling a model,
loading data), do not use up the budget.

Counting imports nothing big. PyTorch wraps a dispatch mode's ``__torch_dispatch__`` in
``torch._disable_dynamo``, whose first call imports ``torch._dynamo`` (about 1 CPU-s, ~830
modules with sympy): a script that updates its weights by hand (no ``torch.optim``, which
imports it) paid that in its first counted step. The wrapper keeps dynamo from tracing the
mode's own code, which can only happen once dynamo is loaded; so our mode is unwrapped while
it is not, and PyTorch's wrapper (free by then) is used once it is. Dynamo runs a compiled
model eagerly while a mode is on the stack, so its first step is counted like any other.
``torch.compile`` first called inside the counted step loads dynamo under the unwrapped mode:
from the first op or module call after that, the mode dispatches through PyTorch's wrapper.
Only a compiled function whose very first op comes before any module call can have dynamo
trace the start of the unwrapped dispatch, up to its call of the counting, which runs outside
the trace: the step runs and is counted as eager code (but under ``python -W error``, if that
op's tensors are not leaves, a warning of dynamo's own stops it).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch._compile import _disable_dynamo
from torch.utils._python_dispatch import TorchDispatchMode

from trainpace.measure.op_costs import FAMILIES, OpTally, flop_formulas

logger = logging.getLogger(__name__)

BUDGET_S = 5.0  # CPU seconds of counted ops before counting stops on its own

@dataclass(frozen=True, kw_only=True)
class FamilyCount:
    """FLOPs, bytes and op count of one op family in the counted step."""

    family: str
    flops: float
    bytes: float
    ops: int


@dataclass(frozen=True, kw_only=True)
class StepCount:
    """What one training step computed and moved."""

    flops: float
    bytes: float
    ops: int
    families: tuple[FamilyCount, ...]  # in FAMILIES order, families seen only
    flops_by_dtype: Mapping[str, float] = field(default_factory=dict)
    samples: int | None = None  # samples in the counted step, when the caller said

    @property
    def dtype(self) -> str | None:
        """The dtype that carried most FLOPs (the peak MFU is measured against)."""
        if not self.flops_by_dtype:
            return None
        return max(self.flops_by_dtype.items(), key=lambda item: item[1])[0]

    def family(self, name: str) -> FamilyCount | None:
        """The count of one family, or None if the step ran no op of it."""
        return next((f for f in self.families if f.family == name), None)


def _step_count(tally: OpTally, samples: int | None) -> StepCount:
    families = tuple(
        FamilyCount(family=f, flops=tally.flops.get(f, 0.0), bytes=tally.bytes.get(f, 0.0),
                    ops=tally.ops[f])
        for f in FAMILIES
        if f in tally.ops
    )
    return StepCount(
        flops=sum(f.flops for f in families),
        bytes=sum(f.bytes for f in families),
        ops=sum(f.ops for f in families),
        families=families,
        flops_by_dtype=dict(tally.flops_by_dtype),
        samples=samples,
    )


class _CountingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sees every ATen op of the counted step: runs it, tallies its FLOPs (PyTorch's formula for
    its op packet) and bytes, and tells its counter when the budget is spent."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would wrap __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports torch._dynamo (~1 CPU-s); __torch_dispatch__ keeps dynamo out itself.
        return False

    def __init__(self, tally: OpTally, counter: StepCounter) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._tally = tally
        self._counter = counter
        self._formulas = flop_formulas()
        self._decomposes: dict[Any, bool] = {}
        self._parts_depth = 0  # > 0: inside a decomposed op, whose parts add to its FLOPs
        self._parts_flops = 0.0
        self.spent = False  # past the budget: ops pass straight through

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        if "torch._dynamo" in sys.modules:
            # torch.compile was first called inside the counted step: dynamo may be tracing
            # this frame (it skips compiled code while a mode is on the stack, but this one
            # runs with the mode off); counting runs outside the trace, and the next op
            # comes through PyTorch's wrapper, which dynamo never traces.
            return _dispatch_without_dynamo(self, func, args, kwargs or {})
        return self._dispatch(func, args, kwargs or {})

    def keep_dynamo_out(self) -> None:
        """From the next op on, dispatch through PyTorch's wrapper (free once dynamo is
        loaded); the mode stays where it is on the stack, even inside backward()."""
        self.__class__ = _DynamoCountingMode

    def _dispatch(self, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        if type(self) is _CountingMode and "torch._dynamo" in sys.modules:
            self.keep_dynamo_out()  # loaded since the last op
        if self.spent:
            return func(*args, **kwargs)
        if self._parts_depth:
            out, flops = self._run(func, args, kwargs)
            self._parts_flops += flops
            return out
        counter = self._counter
        started_s = counter.cpu_clock()
        out, flops = self._run(func, args, kwargs)
        if self._tally.error is None:
            try:
                self._tally.record(func, args, kwargs, out, flops)
            except Exception as exc:  # noqa: BLE001 - counting must never break the step
                self._tally.error = f"{func}: {type(exc).__name__}: {exc}"
        counter.ops_cpu_s += counter.cpu_clock() - started_s
        if counter.over_budget():
            # No mode can leave the stack from here (inside backward() the stack is the
            # autograd engine's copy, restored when it ends): from now on ops go past this
            # mode, until the next module call or the step's end takes it off.
            self.spent = True
            counter.stop_counting(inside_dispatch=True)
        return out

    def _run(self, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
             ) -> tuple[Any, float]:
        """The op's output and FLOPs, as FlopCounterMode counts them: an op with a
        CompositeImplicitAutograd kernel runs as its parts, which carry its FLOPs."""
        if self._decomposable(func):
            outer_flops, self._parts_flops = self._parts_flops, 0.0
            self._parts_depth += 1
            try:
                with self:
                    out = func.decompose(*args, **kwargs)
                parts_flops = self._parts_flops
            finally:
                self._parts_depth -= 1
                self._parts_flops = outer_flops
            if out is not NotImplemented:
                return out, parts_flops
        out = func(*args, **kwargs)
        formula = self._formulas.get(func.overloadpacket)
        if formula is None:
            return out, 0.0
        try:
            return out, float(formula(*args, **kwargs, out_val=out))
        except Exception as exc:  # noqa: BLE001 - counting must never break the step
            if self._tally.error is None:
                self._tally.error = f"{func}: {type(exc).__name__}: {exc}"
            return out, 0.0

    def _decomposable(self, func: Any) -> bool:
        known = self._decomposes.get(func)
        if known is None:
            implicit = torch._C.DispatchKey.CompositeImplicitAutograd
            known = self._decomposes[func] = func is not torch.ops.prim.device.default and (
                implicit in func.py_kernels
                or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), implicit))
        return known


# Wrapped now, made on its first call (torch._dynamo is loaded by then).
_dispatch_without_dynamo = _disable_dynamo(_CountingMode._dispatch)


class _DynamoCountingMode(_CountingMode):  # type: ignore[no-untyped-call]
    """What the counting mode becomes once torch._dynamo is loaded: PyTorch keeps dynamo out
    of its dispatch, as it does for every mode (the wrapper costs nothing by then)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        return self._dispatch(func, args, kwargs or {})


def _current_graph_task() -> int:
    """The id of the backward pass running on this thread (-1: none)."""
    current = getattr(torch._C, "_current_graph_task_id", None)
    return int(current()) if current is not None else -1


class StepCounter:
    """Context manager: count the FLOPs and bytes of the code it wraps (one step).

    ``result`` is a :class:`StepCount` after a clean exit, None if the wrapped code raised or
    counting failed (``error`` then says why). ``samples`` (the step's sample count) lets the
    figures scale FLOPs with the samples of other steps.
    """

    def __init__(self, *, samples: int | None = None, budget_s: float = BUDGET_S,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.samples = samples
        self.result: StepCount | None = None
        self.error: str | None = None
        self.budget_s = budget_s
        self.cpu_clock = cpu_clock
        self.ops_cpu_s = 0.0  # CPU time of the ops counted so far, counting included
        self._tally = OpTally()
        self._modes: list[Any] = []  # entered, innermost last
        self._hook: Any = None  # the module pre-hook that ends an overrun count

    @property
    def counting(self) -> bool:
        """Whether the counting mode is still on (False once the budget is spent)."""
        return bool(self._modes)

    def over_budget(self) -> bool:
        """Whether the counted ops have taken more than :attr:`budget_s` of CPU time."""
        return self.ops_cpu_s > self.budget_s

    def __enter__(self) -> StepCounter:
        try:
            # our global module pre-hook makes torch.compile warn once per compiled
            # module; that warning is ours, not the user's (and -W error would raise)
            quiet = warnings.catch_warnings()
            quiet.__enter__()
            self._modes.append(quiet)
            warnings.filterwarnings(
                "ignore", message=r"Using `torch.compile\(module\)` when there are global hooks",
                category=UserWarning)
            from torch.nn.modules.module import register_module_forward_pre_hook

            mode = _CountingMode(self._tally, self)
            if "torch._dynamo" in sys.modules:
                mode.keep_dynamo_out()
            mode.__enter__()  # type: ignore[no-untyped-call]
            self._modes.append(mode)
            self._hook = register_module_forward_pre_hook(self._module_called)
        except Exception as exc:  # noqa: BLE001 - a counter that cannot start counts nothing
            self.error = f"cannot start counting ({type(exc).__name__}: {exc})"
            self._exit_modes()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        counting = self.counting and self.error is None
        self._exit_modes()
        if exc_type is not None or not counting:
            return
        if self._tally.error is not None:
            self.error = self._tally.error
            logger.info("trainpace: FLOP/byte counting failed (%s); flops are unknown", self.error)
            return
        self.result = _step_count(self._tally, self.samples)

    def _module_called(self, module: Any, args: Any) -> None:
        # Between ops, outside any dispatch: the mode can leave here, unless this is a
        # module recomputed inside backward() (activation checkpointing; see _CountingMode).
        if not self.counting:
            return
        mode = self._modes[-1]
        if type(mode) is _CountingMode and "torch._dynamo" in sys.modules:
            # torch.compile was first called inside the counted step: a compiled module may
            # be about to run
            mode.keep_dynamo_out()
        if self.over_budget() and _current_graph_task() == -1:
            self.stop_counting(inside_dispatch=False)

    def stop_counting(self, *, inside_dispatch: bool) -> None:
        """The budget is spent and no step ended: stop counting (the FLOPs are unknown).

        Inside a dispatch the modes stay on the stack, passing ops through (see
        :class:`_CountingMode`); they leave at the next module call or at :meth:`__exit__`.
        """
        if self.error is None:
            self.error = (f"the counted step did not end within {self.budget_s:g} s of its "
                          "ops' CPU time (no optimizer step?); counting stopped, FLOPs are "
                          "unknown")
            logger.info("trainpace: %s", self.error)
        if not inside_dispatch:
            self._exit_modes()

    def _exit_modes(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        while self._modes:
            self._leave(self._modes.pop())

    def _leave(self, mode: Any) -> None:
        try:
            mode.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001 - leaving a mode must not break the step
            self.error = self.error or f"cannot stop counting ({type(exc).__name__}: {exc})"

