"""``torch.autograd.backward``, replaced: its scalar tensor is the step's loss, and while no
optimizer exists (none made while installed, none stepped) each call ends a step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.autograd

from trainpace.integrations.autopatch.scaler import ScalerPatch
from trainpace.integrations.autopatch.steps import Steps


class BackwardPatch:
    """Hands the loss (kept on the device, read at the window boundary, never synchronized)
    to ``meter.observe``; ``Tensor.backward`` calls ``torch.autograd.backward``, so both are
    seen."""

    def __init__(self, steps: Steps, scaler: ScalerPatch) -> None:
        self._steps = steps
        self._scaler = scaler
        self._original_backward: Callable[..., Any] | None = None

    def install(self) -> None:
        self._original_backward = torch.autograd.backward
        torch.autograd.backward = self._backward

    def remove(self) -> None:
        if self._original_backward is not None:
            torch.autograd.backward = self._original_backward
            self._original_backward = None

    def _backward(self, tensors: Any, *args: Any, **kwargs: Any) -> Any:
        original = self._original_backward
        if original is None:
            return torch.autograd.backward(tensors, *args, **kwargs)
        steps = self._steps
        if steps.elsewhere():
            return original(tensors, *args, **kwargs)
        seen = steps.seen
        seen.backward_calls += 1
        steps.untrained_from = steps.untrained_batch = None  # its batches are trained on
        # After the step's optimizer step, a backward() is still its own (a GAN's second
        # network): the step is one whole iteration, as a `with meter.step()` body would be.
        if steps.context is None:
            steps.open()
        if type(tensors) is torch.Tensor or isinstance(tensors, torch.Tensor):
            try:
                if tensors.numel() == 1:  # a loss; a vector-Jacobian product is not one
                    scaler = self._scaler
                    loss = tensors if scaler.scaled is None else scaler.unscaled(tensors)
                    steps.meter.observe(loss=loss)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                steps.fault("keeping the loss", exc)
        done = original(tensors, *args, **kwargs)
        if not (seen.optimizers_made or seen.optimizers) and steps.context is not None:
            steps.done()  # no optimizer will end the step: its backward() does
        return done
