"""The verdict and the advice of the tuner, computed from what it measured."""

from __future__ import annotations

import math

from torch.utils.data import RandomSampler, SequentialSampler
from torch.utils.data._utils.collate import default_collate

from trainpace.tune.tuning import TARGET_WAIT_PCT, Probe, Setting, Trial
from trainpace.units import format_duration as duration


def loader_line(setting: Setting, batch_size: int | None, kept: dict[str, object],
                collate_fn: object = None) -> str:
    """The ``DataLoader(...)`` call to paste; the settings the tuner kept from a DataLoader
    appear as they were given (``shuffle=True``) or by name (``sampler=sampler``)."""
    parts = ["dataset"]
    if "batch_sampler" in kept:
        parts.append("batch_sampler=batch_sampler")
    else:
        if batch_size is not None:
            parts.append(f"batch_size={batch_size}")
        sampler = kept.get("sampler")
        if isinstance(sampler, RandomSampler) and not sampler.replacement:
            parts.append("shuffle=True")
        elif sampler is not None and not isinstance(sampler, SequentialSampler):
            parts.append("sampler=sampler")
        if kept.get("drop_last"):
            parts.append("drop_last=True")
    if collate_fn is not None and collate_fn is not default_collate:
        parts.append("collate_fn=collate_fn")
    for key, value in setting.kwargs().items():
        parts.append(f"{key}={value!r}")
    return f"DataLoader({', '.join(parts)})"


def where_time_goes(probe: Probe) -> str:
    """One batch's time in one process, split into CPU in __getitem__, waiting, collate."""
    per_batch = probe.batch_s or 1e-12
    size = round((probe.batch_s - probe.collate_s) / probe.sample_s) if probe.sample_s else 0
    cpu = min(probe.sample_cpu_s, probe.sample_s) * size
    wait = probe.sample_wait_s * size
    runq = probe.sample_runq_s * size
    busy = f", {100 * runq / per_batch:.0f}% waiting for a core (a busy machine)" \
        if runq > 0.05 * per_batch else ""
    return (f"a batch takes {duration(probe.batch_s)} in one process: "
            f"{100 * cpu / per_batch:.0f}% CPU in __getitem__, "
            f"{100 * wait / per_batch:.0f}% waiting (I/O, sleeps, locks){busy}, "
            f"{100 * probe.collate_s / per_batch:.0f}% collate")


def unreachable_advice(
    *,
    probe: Probe,
    best: Trial,
    step_s: float,
    bound: str | None,
    cores: int | None,
    cpu_s_per_batch: float | None,
    stopped_by: str | None,
) -> list[str]:
    """What would bring the wait under the target, when no setting tried did."""
    advice: list[str] = []
    # Under the target the loader must deliver a batch about every step (the wait is a small
    # share of it), so the pipeline needs batch_s / step_s batches in flight at once.
    deliver_s = step_s
    cpu_batch = cpu_s_per_batch if cpu_s_per_batch is not None else \
        min(probe.sample_cpu_s, probe.sample_s) * max(1, round(probe.batch_s / probe.sample_s)
                                                      if probe.sample_s else 1)
    if bound == "cpu" and cpu_batch > 0:
        cores_needed = math.ceil(cpu_batch / deliver_s)
        have = f"{cores} usable" if cores else "the usable ones"
        advice.append(
            f"loading is CPU work: {duration(cpu_batch)} of CPU per batch, one batch needed "
            f"every {duration(deliver_s)}: about {cores_needed} cores' worth, {have}; make "
            "__getitem__ cheaper (decode once and cache the result, lighter or fewer "
            "transforms, augment on the device) or run on more cores")
    else:
        advice.append(
            "loading mostly waits (I/O, network, sleeps): cache the samples (in memory or on "
            "a local disk), read larger chunks, or use more workers than cores"
            + (f" — the search stopped at {best.setting.num_workers} workers: {stopped_by}"
               if stopped_by else ""))
    if probe.collate_s > 0.3 * probe.batch_s:
        advice.append(f"collate takes {100 * probe.collate_s / probe.batch_s:.0f}% of a batch "
                      f"({duration(probe.collate_s)}): a cheaper collate_fn, or return "
                      "ready-made tensors from the dataset")
    advice.append(
        f"a larger batch helps only if the step grows slower than the batch (a device with "
        f"room to spare): loading costs {duration(probe.sample_s)} per sample either way")
    return advice


def verdict_text(
    *,
    recommended: Setting,
    trial: Trial,
    reachable: bool | None,
    step_s: float | None,
    probe: Probe,
    startup_s: float | None,
) -> str:
    workers = recommended.num_workers
    if reachable is None:
        return (f"no step time given: {recommended.label()} loads "
                f"{trial.batches_per_s:.1f} batches/s, within 10% of the fastest setting "
                "tried; pass step_s (--step-ms, or --run RUN) to size it for your step")
    assert step_s is not None
    assert trial.wait_pct is not None
    if reachable:
        text = (f"{recommended.label()} hides the loading: the wait is {trial.wait_pct:.1f}% of "
                f"a {duration(step_s)} step (target under {TARGET_WAIT_PCT:.0f}%)")
        if workers and startup_s:
            text += (f"; persistent_workers=True saves the {duration(startup_s)} start of "
                     "the workers at every epoch")
        return text
    return (f"no setting tried brings the wait under {TARGET_WAIT_PCT:.0f}% of a "
            f"{duration(step_s)} step: the best, {recommended.label()}, still waits "
            f"{trial.wait_pct:.0f}%; one sample costs {duration(probe.sample_s)} "
            f"({where_time_goes(probe)})")
