"""Advice computed from the run's own figures: what to change, to what, and the expected gain.

Pure functions of numbers and settings; the rules call them with what they measured. A piece
of advice names the setting and the value to try, and says what it is computed from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trainpace.units import format_duration as duration


def gain_if_removed(lost_pct: float) -> float:
    """The speed-up if a share of the time (percent) disappeared entirely: 1 / (1 − share)."""
    share = min(max(lost_pct, 0.0), 99.0) / 100.0
    return 1.0 / (1.0 - share)


def gain_text(lost_pct: float) -> str:
    """``expected gain up to 1.6×`` for a share of the time that could be removed."""
    return f"expected gain up to {gain_if_removed(lost_pct):.2g}×"


def _call(settings: Mapping[str, Any]) -> str:
    args = ", ".join(f"{key}={value!r}" for key, value in settings.items())
    return f"`DataLoader({args})`"


def workers_needed(
    *, batch_load_s: float, compute_s: float, headroom: float, cpu_count: int | None
) -> tuple[int, bool]:
    """Workers that deliver a batch every ``compute_s`` when each takes ``batch_load_s``.

    Returns (workers, capped): at least 2, at most ``cpu_count - 1`` (one core for the training
    loop, as Lightning suggests) when the core count is known; ``capped`` says the cap bit.
    """
    needed = max(2, math.ceil(headroom * batch_load_s / compute_s))
    if cpu_count is not None and cpu_count > 1 and needed > cpu_count - 1:
        return max(1, cpu_count - 1), True
    return needed, False


def loader_advice(
    *,
    wait_pct: float,
    wait_s: float,
    step_s: float,
    loader: Mapping[str, Any] | None,
    device_kind: str | None,
    cpu_count: int | None,
    bursty: bool,
    headroom: float,
) -> list[str]:
    """What to change in the DataLoader, computed from the measured wait and step time.

    The model: with ``w`` workers a batch takes each worker ``w × step`` when the loop is
    loader-bound (``wait`` itself when ``w = 0``: the loop loads it), and the loader must deliver
    one every ``step − wait`` (the time the step spends outside the loader), with headroom.
    """
    gain = gain_text(wait_pct)
    compute_s = step_s - wait_s
    cuda = device_kind == "cuda"
    if loader is None:
        unknown = [
            f"data wait is {wait_pct:.0f}% of the step ({duration(wait_s)} of "
            f"{duration(step_s)}); the DataLoader's settings were not recorded (wrap it with "
            f"meter.loader(...)); raise num_workers until the wait is gone — {gain}"
        ]
        if compute_s > 0:
            unknown.append(
                f"the loader must deliver a batch every {duration(compute_s)} (the step's "
                "time outside the loader); each worker makes one batch at a time"
            )
        return unknown
    workers = int(loader.get("num_workers") or 0)
    batch_load_s = wait_s if workers == 0 else workers * step_s
    suggest: dict[str, Any] = {}
    capped = False
    if compute_s > 0:
        needed, capped = workers_needed(
            batch_load_s=batch_load_s, compute_s=compute_s, headroom=headroom, cpu_count=cpu_count
        )
        if needed > workers:
            suggest["num_workers"] = needed
    if cuda and not loader.get("pin_memory"):
        suggest["pin_memory"] = True
    if workers > 0 or "num_workers" in suggest:
        if not loader.get("persistent_workers"):
            suggest["persistent_workers"] = True
        prefetch = int(loader.get("prefetch_factor") or 2)
        if bursty and prefetch < 4:
            suggest["prefetch_factor"] = 4
    advice: list[str] = []
    if suggest:
        advice.append(
            f"data wait is {wait_pct:.0f}% of the step with `num_workers={workers}`; try "
            f"{_call(suggest)} — {gain}"
        )
    else:
        advice.append(
            f"data wait is {wait_pct:.0f}% of the step with `num_workers={workers}` — {gain} "
            "if loading is made cheaper"
        )
    if capped or (compute_s > 0 and "num_workers" not in suggest and workers > 0):
        cores = f"{cpu_count} CPU cores" if cpu_count else "the CPU cores"
        advice.append(
            f"workers alone cannot hide it on {cores}: one batch takes ~{duration(batch_load_s)} "
            f"to load but the step needs one every {duration(compute_s)}; make loading "
            "cheaper (decode once and cache, move augmentation to the device, a faster decoder)"
        )
    if bursty:
        advice.append(
            "the wait comes in bursts (median wait well below the mean): a deeper prefetch "
            "queue smooths them"
        )
    if cuda and "pin_memory" in suggest:
        advice.append("with pin_memory=True, copy with `.to(device, non_blocking=True)`")
    if device_kind == "cpu" and "num_workers" in suggest:
        advice.append(
            "on a CPU-only run, workers take cores from the model's threads: "
            "check torch.get_num_threads() against the cores left"
        )
    return advice
