"""``GradScaler.scale``, wrapped: which tensor it made from which, so that the loss kept is
the one before scaling."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.amp.grad_scaler import GradScaler

from trainpace.integrations.autopatch.steps import Steps


class ScalerPatch:
    """Remembers the latest tensor ``GradScaler.scale`` made and the loss it was made from."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._original_scale: Callable[..., Any] | None = None
        # (the tensor GradScaler.scale made, the one it was made from): the loss to keep
        # when the former reaches backward(). None until a GradScaler scales.
        self.scaled: tuple[weakref.ref[torch.Tensor], torch.Tensor] | None = None

    def install(self) -> None:
        original_scale = GradScaler.scale
        self._original_scale = original_scale
        patch = self

        def scale(scaler: GradScaler, outputs: Any) -> Any:
            scaled = original_scale(scaler, outputs)
            if scaled is not outputs and isinstance(scaled, torch.Tensor):
                patch._remember(scaled, outputs)
            return scaled

        GradScaler.scale = scale  # type: ignore[method-assign,assignment]

    def remove(self) -> None:
        if self._original_scale is not None:
            GradScaler.scale = self._original_scale  # type: ignore[method-assign]
            self._original_scale = None
        self.scaled = None

    def unscaled(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` as it was before ``GradScaler.scale`` (itself when it was not scaled)."""
        scaled = self.scaled
        if scaled is not None and scaled[0]() is loss:
            self.scaled = None
            return scaled[1]
        return loss

    def _remember(self, scaled: torch.Tensor, outputs: Any) -> None:
        try:
            if isinstance(outputs, torch.Tensor):
                # Detached: nothing of the graph is kept should backward() never come.
                self.scaled = (weakref.ref(scaled), outputs.detach())
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._steps.fault("keeping the loss before scaling", exc)
