"""The training step to simulate, taken from a run folder the Meter wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainpace.errors import RunFolderError
from trainpace.measure.summarize import summary_for_run
from trainpace.runlog import read_run
from trainpace.stats import median


def step_device_of_run(path: str | Path) -> str | None:
    """The device kind the run trained on ("cpu", "cuda", ...), from its meta.json; None
    when it does not say."""
    device = read_run(path).meta.get("device")
    kind = device.get("kind") if isinstance(device, dict) else None
    return kind if isinstance(kind, str) else None


def step_from_run(path: str | Path) -> tuple[float, str]:
    """(step time without the data wait, how it was found) for a run folder.

    The median over the measured steps of ``step_s − wait_s`` from ``steps.jsonl``: the time
    a step spends outside the loader, which is what the loader must keep up with. Without
    step records, the summary's median step minus its mean wait.
    """
    run = read_run(path)
    warmup = summary_for_run(run).steps.warmup if len(run.series) else 0
    series = run.series
    after_warmup = series.column("step") > warmup
    outside = (series.column("step_s") - np.nan_to_num(series.column("wait_s")))[after_warmup]
    outside = outside[np.isfinite(outside) & (outside > 0)]
    if outside.size:
        value = median(outside)
        if value is not None and value > 0:
            return value, f"{run.path}: median of {outside.size} measured steps, data wait excluded"
    summary = run.summary
    if summary is not None and summary.time.step_s_median:
        wait = summary.data.wait_s_per_step or 0.0
        if summary.time.step_s_median - wait > 0:
            return (summary.time.step_s_median - wait,
                    f"{run.path}: summary median step, data wait excluded")
    raise RunFolderError(f"{run.path}: no measured step times to take the step from; "
                         "pass --step-ms instead")
