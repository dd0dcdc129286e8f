"""FLOPs and bytes moved by one training step, counted once, per op family.

The step runs under ``torch.utils.flop_counter.FlopCounterMode`` (PyTorch's own FLOP formulas:
matmuls, convolutions, attention) and, on top of it, a dispatch mode of ours that sees every
ATen op first and tallies:

- the bytes it reads and writes: every distinct tensor input plus every output, at the size
  the op touches (a view counts its own elements, a broadcast input its distinct ones); views
  and allocations move nothing. This is the traffic of an unfused execution with no cache
  reuse: close to DRAM traffic for large tensors on a GPU, an overstatement when tensors fit
  in a cache or kernels are fused (``torch.compile``);
- the FLOPs FlopCounterMode added while the op ran, attributed to the op's family and to
  the dtype it computed in (float32 matmuls on CUDA count as ``tf32`` when PyTorch allows it).

Only ops with a FLOP formula have FLOPs (elementwise ops count 0), which is what model FLOPs
utilization means. Counting never raises into the step: a failure of ours leaves the
result ``None``, logged once; an exception from the step itself propagates unchanged.

Counting costs tens of microseconds per op, so it is bounded: a step whose ops have taken
:data:`BUDGET_S` of CPU time under counting without the step ending (a loop without an
optimizer step, whose "first step" never ends) stops counting on its own, at the next op or
module call, and its FLOPs are unknown. The CPU time of the ops themselves, not wall time:
other processes taking the CPU, and what the loop does between ops (compiling a model,
loading data), do not use up the budget.

The first op under counting in a process also pays a one-time import of ``torch._dynamo``
(about 1 CPU-s, ~830 modules with sympy): PyTorch wraps every dispatch mode's
``__torch_dispatch__`` (ours and FlopCounterMode's) in ``torch._disable_dynamo``, which imports
it on first call. A script that builds a ``torch.optim`` optimizer has imported it already,
before its loop; one that updates its weights by hand has not, and its first step carries it.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch._compile import _disable_dynamo
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

logger = logging.getLogger(__name__)

BUDGET_S = 5.0  # CPU seconds of counted ops before counting stops on its own

FAMILIES: tuple[str, ...] = ("matmul", "conv", "attention", "elementwise", "reduction", "other")

_MATMUL = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "addmv", "dot", "vdot",
    "_scaled_mm", "_int_mm", "_addmm_activation", "linear",
})
_REDUCTION = frozenset({
    "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
    "native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
    "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "native_group_norm", "native_group_norm_backward",
    "_fused_rms_norm", "_fused_rms_norm_backward", "nll_loss_forward", "nll_loss_backward",
    "nll_loss2d_forward", "nll_loss2d_backward", "cumsum", "logsumexp", "norm",
    "linalg_vector_norm", "topk", "sort", "argmax", "argmin",
})
_ELEMENTWISE = frozenset({
    "copy_", "_to_copy", "fill_", "zero_", "clone", "zeros_like", "ones_like", "full_like",
    "uniform_", "normal_", "bernoulli_", "native_dropout", "native_dropout_backward",
    "_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adam", "_fused_adamw",
})
# In-place ops that overwrite ``self`` without reading it.
_WRITE_ONLY_SELF = frozenset({
    "copy_", "fill_", "zero_", "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
    "geometric_", "cauchy_", "log_normal_",
})
# Ops that allocate or describe memory without moving data.
_NO_TRAFFIC = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
    "detach", "alias", "lift_fresh", "_local_scalar_dense", "set_", "_unsafe_view",
})


_POINTWISE = getattr(torch.Tag, "pointwise", None)
_REDUCTION_TAG = getattr(torch.Tag, "reduction", None)  # not in every PyTorch release


def op_family(func: torch._ops.OpOverload) -> str:
    """The family (one of :data:`FAMILIES`) of an ATen op."""
    name = func.overloadpacket.__name__
    if name in _MATMUL:
        return "matmul"
    if "conv" in name:
        return "conv"
    if "attention" in name:
        return "attention"
    tags = func.tags
    if _POINTWISE in tags or name in _ELEMENTWISE or name.startswith("_foreach_"):
        return "elementwise"
    if _REDUCTION_TAG in tags or name in _REDUCTION:
        return "reduction"
    return "other"


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor (or view) addresses: broadcast dims count once.

    Sparse and other non-strided layouts count their stored values only when PyTorch says
    how many; else nothing (unknown is not guessed).
    """
    if t.layout != torch.strided:
        try:
            return int(t._nnz()) * t.element_size()
        except (RuntimeError, AttributeError, NotImplementedError):
            return 0
    elements = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if size == 0:
            return 0
        if stride != 0:
            elements *= size
    return elements * t.element_size()


def _dtype_key(tensor: torch.Tensor, family: str) -> str:
    """The peak-table dtype an op with FLOPs ran in."""
    dtype = tensor.dtype
    if dtype == torch.float32 and tensor.device.type == "cuda":
        if family == "conv" and torch.backends.cudnn.allow_tf32:
            return "tf32"
        if family != "conv" and torch.get_float32_matmul_precision() != "highest":
            return "tf32"
    name = str(dtype).removeprefix("torch.")
    return "float8" if name.startswith("float8") else name


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


@dataclass
class _Tally:
    flops: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    flops_by_dtype: dict[str, float] = field(default_factory=dict)
    family_of: dict[Any, str] = field(default_factory=dict)
    error: str | None = None

    def record(self, func: torch._ops.OpOverload, args: tuple[Any, ...],
               kwargs: Mapping[str, Any], out: Any, flops: float) -> None:
        name = func.overloadpacket.__name__
        if not flops and (func.is_view or name in _NO_TRAFFIC):
            return  # moves no data, computes nothing
        family = self.family_of.get(func)
        if family is None:
            family = self.family_of[func] = op_family(func)
        inputs = list(_tensors(args[1:] if name in _WRITE_ONLY_SELF else args))
        inputs += _tensors({k: v for k, v in kwargs.items() if k != "out"})
        moved = sum(tensor_bytes(t) for t in _distinct(inputs))
        moved += sum(tensor_bytes(t) for t in _distinct(_tensors(out)))
        self.ops[family] = self.ops.get(family, 0) + 1
        self.bytes[family] = self.bytes.get(family, 0.0) + moved
        if flops:
            self.flops[family] = self.flops.get(family, 0.0) + flops
            first = next(iter(t for t in _tensors(args) if t.is_floating_point()), None)
            key = _dtype_key(first, family) if first is not None else "unknown"
            self.flops_by_dtype[key] = self.flops_by_dtype.get(key, 0.0) + flops

    def result(self, samples: int | None) -> StepCount:
        families = tuple(
            FamilyCount(family=f, flops=self.flops.get(f, 0.0), bytes=self.bytes.get(f, 0.0),
                        ops=self.ops[f])
            for f in FAMILIES
            if f in self.ops
        )
        return StepCount(
            flops=sum(f.flops for f in families),
            bytes=sum(f.bytes for f in families),
            ops=sum(f.ops for f in families),
            families=families,
            flops_by_dtype=dict(self.flops_by_dtype),
            samples=samples,
        )


def _tensors(tree: Any) -> Iterator[torch.Tensor]:
    return (leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor))


def _distinct(tensors: Iterator[torch.Tensor] | list[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


class _CountingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sees every ATen op of the counted step: runs it, tallies its FLOPs (PyTorch's formula for
    its op packet) and bytes, and tells its counter when the budget is spent."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would wrap __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports torch._dynamo (~1 CPU-s); __torch_dispatch__ keeps dynamo out itself.
        return False

    def __init__(self, tally: _Tally, counter: StepCounter) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._tally = tally
        self._counter = counter
        self._formulas = _flop_formulas()
        self._decomposes: dict[Any, bool] = {}
        self._parts_depth = 0  # > 0: inside a decomposed op, whose parts add to its FLOPs
        self._parts_flops = 0.0
        self.spent = False  # past the budget: ops pass straight through

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        if "torch._dynamo" in sys.modules:
            # torch.compile was first called inside the counted step: dynamo may be tracing
            # this frame (it skips compiled code while a mode is on the stack, but this one
            # runs with the mode off); counting runs outside the trace.
            return _dispatch_without_dynamo(self, func, args, kwargs or {})
        return self._dispatch(func, args, kwargs or {})

    def _dispatch(self, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
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
    """The mode for a process that has loaded torch._dynamo: PyTorch keeps dynamo out of this
    one's dispatch as of every mode (its wrapper costs nothing once dynamo is loaded)."""

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


def _flop_formulas() -> dict[Any, Callable[..., Any]]:
    """PyTorch's FLOP formulas by op packet (``torch.utils.flop_counter``'s registry, the one
    FlopCounterMode applies), plus CPU attention kernels that its table lacks (same math)."""
    from torch.utils import flop_counter as fc

    def forward(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(fc.sdpa_flop_count(query.shape, key.shape, value.shape))  # type: ignore[no-untyped-call]

    def backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any,
                 **kwargs: Any) -> int:
        return int(fc.sdpa_backward_flop_count(  # type: ignore[no-untyped-call]
            grad_out.shape, query.shape, key.shape, value.shape))

    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., Any]] = dict(fc.flop_registry)
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", forward),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", backward),
    ):
        packet = getattr(aten, name, None)
        if packet is not None:
            formulas.setdefault(packet, formula)
    return formulas


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
        self._tally = _Tally()
        self._modes: list[Any] = []  # entered, innermost last
        self._hook: Any = None  # the module pre-hook that ends an overrun count

    @property
    def counting(self) -> bool:
        """Whether any of the counting modes is still on (False once the budget is spent)."""
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

            self._enter_mode()
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
        self.result = self._tally.result(self.samples)

    def _enter_mode(self) -> None:
        # the plain mode while no compiled code can run: its dispatch imports nothing
        mode_type = _DynamoCountingMode if "torch._dynamo" in sys.modules else _CountingMode
        mode = mode_type(self._tally, self)
        mode.__enter__()  # type: ignore[no-untyped-call]
        self._modes.append(mode)

    def _module_called(self, module: Any, args: Any) -> None:
        # Between ops, outside any dispatch: the mode can leave or change here, unless this
        # is a module recomputed inside backward() (activation checkpointing; see
        # _CountingMode). A compiled module about to run for the first time in this process
        # (torch.compile called inside the counted step) gets the mode dynamo stays out of.
        if not self.counting:
            return
        if self.over_budget():
            if _current_graph_task() == -1:
                self.stop_counting(inside_dispatch=False)
        elif (type(self._modes[-1]) is _CountingMode and "torch._dynamo" in sys.modules
              and _current_graph_task() == -1):
            self._leave(self._modes.pop())
            self._enter_mode()

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

