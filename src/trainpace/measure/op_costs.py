"""What one ATen op costs: its family, the bytes it moves, its FLOPs (PyTorch's formulas), and
the tally of a step's ops that :mod:`trainpace.measure.flops` keeps while it counts."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

FAMILIES: tuple[str, ...] = ("matmul", "conv", "attention", "elementwise", "reduction", "other")

_MATMUL = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "addmv", "dot", "vdot",
    "_scaled_mm", "_int_mm", "_addmm_activation", "linear",
    "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward",  # a recurrent layer's gate matmuls
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


def dtype_key(tensor: torch.Tensor, family: str) -> str:
    """The peak-table dtype an op with FLOPs ran in."""
    dtype = tensor.dtype
    if dtype == torch.float32 and tensor.device.type == "cuda":
        if family == "conv" and torch.backends.cudnn.allow_tf32:
            return "tf32"
        if family != "conv" and torch.get_float32_matmul_precision() != "highest":
            return "tf32"
    name = str(dtype).removeprefix("torch.")
    return "float8" if name.startswith("float8") else name


@dataclass
class OpTally:
    """The FLOPs, bytes and op count of a step's ops, per family; FLOPs per dtype too."""

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
            key = dtype_key(first, family) if first is not None else "unknown"
            self.flops_by_dtype[key] = self.flops_by_dtype.get(key, 0.0) + flops


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


def rnn_layer_flops(input_shape: Any, w_ih_shape: Any, w_hh_shape: Any) -> int:
    """One recurrent layer (LSTM on the CPU runs as oneDNN's ``mkldnn_rnn_layer``): at each
    position of the sequence, the input and the hidden state times their gate weights, the
    ``2·M·N·K`` of a matmul. The gates' elementwise work counts 0, as elsewhere."""
    rows = math.prod(input_shape[:-1])  # sequence × batch
    gates = w_ih_shape[0]
    return int(2 * rows * gates * (w_ih_shape[1] + w_hh_shape[1]))


def flop_formulas() -> dict[Any, Callable[..., Any]]:
    """PyTorch's FLOP formulas by op packet (``torch.utils.flop_counter``'s registry, the one
    FlopCounterMode applies), plus CPU kernels that its table lacks: attention (same math) and
    oneDNN's recurrent layer (its backward: the gradients of the inputs and of the weights,
    twice the forward, as for a matmul)."""
    from torch.utils import flop_counter as fc

    def forward(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(fc.sdpa_flop_count(query.shape, key.shape, value.shape))  # type: ignore[no-untyped-call]

    def backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any,
                 **kwargs: Any) -> int:
        return int(fc.sdpa_backward_flop_count(  # type: ignore[no-untyped-call]
            grad_out.shape, query.shape, key.shape, value.shape))

    def rnn_forward(input: Any, w_ih: Any, w_hh: Any, *args: Any, **kwargs: Any) -> int:
        return rnn_layer_flops(input.shape, w_ih.shape, w_hh.shape)

    def rnn_backward(input: Any, w_ih: Any, w_hh: Any, *args: Any, **kwargs: Any) -> int:
        return 2 * rnn_layer_flops(input.shape, w_ih.shape, w_hh.shape)

    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., Any]] = dict(fc.flop_registry)
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", forward),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", backward),
        ("mkldnn_rnn_layer", rnn_forward),
        ("mkldnn_rnn_layer_backward", rnn_backward),
    ):
        packet = getattr(aten, name, None)
        if packet is not None:
            formulas.setdefault(packet, formula)
    return formulas
