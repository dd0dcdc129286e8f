"""The FLOP/byte count as trainpace made it before its own mode applied PyTorch's formulas:
``FlopCounterMode`` counting FLOPs, and a mode on top of it tallying each op's bytes and the
FLOPs FlopCounterMode added while it ran. The tests hold the new counter to these figures."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils import flop_counter as fc
from torch.utils._python_dispatch import TorchDispatchMode

from trainpace.measure.flops import StepCount, _step_count
from trainpace.measure.op_costs import OpTally, rnn_layer_flops


class _BytesOnTop(TorchDispatchMode):
    def __init__(self, tally: OpTally, total_flops: Callable[[], int]) -> None:
        super().__init__()
        self.tally, self.total_flops = tally, total_flops

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        before = self.total_flops()
        out = func(*args, **kwargs)
        self.tally.record(func, args, kwargs, out, self.total_flops() - before)
        return out


def _cpu_attention(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None,
                   **kwargs: Any) -> int:
    return int(fc.sdpa_flop_count(query, key, value))  # shapes: FlopCounterMode passes them


def _cpu_attention_backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any,
                            out_shape: Any = None, **kwargs: Any) -> int:
    return int(fc.sdpa_backward_flop_count(grad_out, query, key, value))


def _rnn_layer(input: Any, w_ih: Any, w_hh: Any, *args: Any, out_shape: Any = None,
               **kwargs: Any) -> int:
    return rnn_layer_flops(input, w_ih, w_hh)


def _rnn_layer_backward(input: Any, w_ih: Any, w_hh: Any, *args: Any, out_shape: Any = None,
                        **kwargs: Any) -> int:
    return 2 * rnn_layer_flops(input, w_ih, w_hh)


def reference_count(fn: Callable[[], object]) -> StepCount:
    """``fn()`` counted the way trainpace did with FlopCounterMode."""
    aten = torch.ops.aten
    mapping = {
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
        aten.mkldnn_rnn_layer: _rnn_layer,
        aten.mkldnn_rnn_layer_backward: _rnn_layer_backward,
    }
    tally = OpTally()
    flop_mode = fc.FlopCounterMode(display=False, custom_mapping=mapping)
    with flop_mode, _BytesOnTop(tally, flop_mode.get_total_flops):
        fn()
    assert tally.error is None, tally.error
    return _step_count(tally, None)
