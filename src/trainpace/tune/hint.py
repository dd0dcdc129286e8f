"""The tuner as the diagnosis uses it: advice lines from a tuning, or the command to run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the diagnosis imports this module: the tuner's results cost 7 ms to load
    from trainpace.tune.result import TuneResult


def command_hint(meta: Mapping[str, Any] | None, run_folder: str | None = None,
                 step_s: float | None = None) -> str:
    """The ``trainpace tune-loader`` command for a run, from its ``meta.json``.

    A run folder cannot re-create the dataset, so the command names the one thing the user
    must supply (a function returning their dataset or DataLoader); the step comes from the
    run (``--run``), or is written out when only its duration is known.
    """
    loader = (meta or {}).get("loader") or {}
    cls = loader.get("class") if isinstance(loader, Mapping) else None
    what = "your DataLoader" if cls else "your dataset or DataLoader"
    if run_folder:
        import shlex  # only here: the diagnosis, which imports this module, names none

        step = f"--run {shlex.quote(str(run_folder))}"
    elif step_s is not None and step_s > 0:
        step = f"--step-ms {step_s * 1000:.3g}"
    else:
        step = "--step-ms STEP_MS"
    return (f"trainpace tune-loader MODULE:FACTORY {step}  (FACTORY: a function in MODULE "
            f"that returns {what}; it finds the fewest workers that hide the wait)")


def advice_lines(result: TuneResult) -> list[str]:
    """What a data_loading finding says after tuning the run's own loader."""
    if result.reachable:
        return [f"measured: {result.code} keeps the wait at {result.wait_pct:.1f}% of the step "
                f"(tuned in {result.elapsed_s:.0f} s, {len(result.trials)} settings tried)"]
    return [f"measured: {result.verdict}", *result.advice]


def tune_advice(loader: Any, *, step_s: float, budget_s: float = 30.0) -> list[str]:
    """Tune a run's own loader and say what was measured, for the data_loading finding.

    For the Meter (or ``trainpace run``), which still holds the loader at ``finish()``. It
    never raises: a loader the tuner cannot run gives one line saying why.
    """
    from trainpace.errors import TrainpaceError
    from trainpace.tune.search import tune_loader

    try:
        return advice_lines(tune_loader(loader, step_s=step_s, budget_s=budget_s))
    except TrainpaceError as exc:
        return [f"the DataLoader tuner could not run this loader: {exc}"]
    except Exception as exc:  # noqa: BLE001 - the user's loader, at the end of their run
        return [f"the DataLoader tuner could not run this loader: {type(exc).__name__}: {exc}"]
