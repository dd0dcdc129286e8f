"""A window's device and host signs for its record, from the Meter's sampler."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Signs = Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]


def vitals_signs(vitals: Callable[[], Any]) -> Signs:
    """A window's device and host signs (throttling, temperature, CPU of this process and of
    the host) from the Meter's sampler, over the window's time span."""
    def signs(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        sampler = vitals()
        if sampler is None or not records:
            return {}
        start_s = float(records[0]["t_s"]) - float(records[0]["step_s"])
        signs: dict[str, Any] = sampler.window_signs(start_s, float(records[-1]["t_s"]))
        return signs

    return signs
