"""The tuner as the Meter uses it at the end of a run: advice lines from tuning its loader."""

from __future__ import annotations

from typing import Any

from trainpace.tune.tuning import TuneResult


def advice_lines(result: TuneResult) -> list[str]:
    """What a data_loading finding says after tuning the run's own loader."""
    if result.reachable:
        return [f"measured: {result.code} keeps the wait at {result.wait_pct:.1f}% of the step "
                f"(tuned in {result.elapsed_s:.0f} s, {len(result.trials)} settings tried)"]
    return [f"measured: {result.verdict}", *result.advice]


def tune_advice(loader: Any, *, step_s: float, budget_s: float = 30.0,
                step_device: str | None = None) -> list[str]:
    """Tune a run's own loader and say what was measured, for the data_loading finding.

    For the Meter (or ``trainpace run``), which still holds the loader at ``finish()``;
    ``step_device`` is the run's device (a CPU run's step is simulated as CPU work). It never
    raises: a loader the tuner cannot run gives one line saying why.
    """
    from trainpace.errors import TrainpaceError
    from trainpace.tune.search import tune_loader

    try:
        return advice_lines(tune_loader(loader, step_s=step_s, budget_s=budget_s,
                                        step_device=step_device))
    except TrainpaceError as exc:
        return [f"the DataLoader tuner could not run this loader: {exc}"]
    except Exception as exc:  # noqa: BLE001 - the user's loader, at the end of their run
        return [f"the DataLoader tuner could not run this loader: {type(exc).__name__}: {exc}"]
