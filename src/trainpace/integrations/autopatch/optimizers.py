"""The optimizers: ``Optimizer.__init__`` counted, and the global step hooks, whose *pacer*
ends a step when its ``step()`` returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as _optimizer

from trainpace.integrations.autopatch.steps import Steps


class OptimizerPatch:
    """The pacer is the first optimizer that ever stepped, until another one steps twice
    without it (a second training loop with its own optimizer), which then paces; the others
    step inside its steps (a GAN's two networks)."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._seen = steps.seen
        self._original_init: Callable[..., Any] | None = None
        self._handles: list[Any] = []
        self._pacer: int | None = None  # id() of the optimizer whose step() ends a step
        # The pacer itself, while installed (compared by identity on the hot path).
        self._pacer_optimizer: torch.optim.Optimizer | None = None
        # Steps of each other optimizer since the pacer's last one: two make it the pacer.
        self._steps_without_pacer: dict[int, int] = {}

    def install(self) -> None:
        original_init = _optimizer.Optimizer.__init__
        self._original_init = original_init
        seen = self._seen

        def __init__(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - the patched dunder
            seen.optimizers_made += 1
            original_init(optimizer, *args, **kwargs)

        _optimizer.Optimizer.__init__ = __init__  # type: ignore[method-assign,assignment]
        self._handles = [
            _optimizer.register_optimizer_step_pre_hook(self._pre_step),
            _optimizer.register_optimizer_step_post_hook(self._post_step),
        ]

    def remove(self) -> None:
        if self._original_init is not None:
            _optimizer.Optimizer.__init__ = self._original_init  # type: ignore[method-assign]
            self._original_init = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._pacer_optimizer = None

    @property
    def pacer(self) -> str | None:
        """Class name of the optimizer whose ``step()`` marks the steps (None before one)."""
        return self._seen.optimizers.get(self._pacer) if self._pacer is not None else None

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        steps = self._steps
        if steps.elsewhere():
            return
        pacer = self._pacer_optimizer
        if optimizer is not pacer and id(optimizer) not in self._seen.optimizers:
            self._first_step_of(optimizer)
            pacer = self._pacer_optimizer
        # A second step() of the pacer without a batch between is a new step; another
        # optimizer's step() after the pacer's is still this step's (a GAN's generator).
        if steps.context is None or (steps.ended and optimizer is pacer):
            steps.open()

    def _first_step_of(self, optimizer: torch.optim.Optimizer) -> None:
        self._seen.optimizers[id(optimizer)] = type(optimizer).__name__
        if self._pacer is None:
            self._pace_with(optimizer)

    def _pace_with(self, optimizer: torch.optim.Optimizer) -> None:
        self._pacer, self._pacer_optimizer = id(optimizer), optimizer
        self._seen.pacers.append(type(optimizer).__name__)
        self._steps_without_pacer.clear()

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._steps.elsewhere():
            return
        if optimizer is not self._pacer_optimizer:
            key = id(optimizer)
            count = self._steps_without_pacer[key] = self._steps_without_pacer.get(key, 0) + 1
            if count < 2:
                return  # stepping inside the pacer's steps (a GAN's other network)
            # Twice without the pacer: the loop the pacer stepped in is over, this one paces.
            # The step open now holds its two iterations (or what came between the loops).
            self._pace_with(optimizer)
        if self._steps_without_pacer:  # (a GAN's other optimizer stepped): its count restarts
            self._steps_without_pacer.clear()
        self._seen.optimizer_steps += 1
        self._steps.done()
