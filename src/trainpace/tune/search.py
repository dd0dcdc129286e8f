"""The search: which DataLoader settings to try, within the time and memory budgets, and
which one to recommend.

Economical, as a person would do it: time the dataset in this process first (what one batch
costs), try no workers, then double the workers until the wait is under the target or stops
falling, then refine between the last two counts. The workers' CPU use says whether loading
is CPU work (then more workers than cores cannot help) or waiting (then they can).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, Protocol

import psutil
import torch

from trainpace.errors import ConfigError
from trainpace.tune import verdict as adv
from trainpace.tune.loader_source import LoaderSource, as_source
from trainpace.tune.probe import probe as run_probe
from trainpace.tune.trial import run_trial
from trainpace.tune.tune_clock import HOST_CLOCK, TuneClock
from trainpace.tune.tuning import TARGET_WAIT_PCT, Bound, Probe, Setting, Trial, TuneResult

# (message, seconds spent, budget): what a progress bar shows.
Progress = Callable[[str, float, float], None]

_MAX_WORKERS = 64          # beyond this the tuner stops doubling, whatever the loading waits on
_CPU_BOUND_SHARE = 0.5     # a worker busy on the CPU this share of a batch's time is CPU-bound
_FALLING = 0.85            # a doubling that does not cut the wait below this share has stalled
# The search aims under the target with a margin, so that the recommendation stays under it
# when measured again on a busy machine; a setting between the two still counts as reaching it.
_SAFE_PCT = 0.8 * TARGET_WAIT_PCT


def _usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count()


def _validate(budget_s: float, step_s: float | None, memory_budget_gb: float | None) -> None:
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise ConfigError("budget_s", budget_s, "must be a number of seconds > 0")
    if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
        raise ConfigError("step_s", step_s, "must be > 0 seconds (the step without its data "
                          "wait), or None")
    if memory_budget_gb is not None and not (math.isfinite(memory_budget_gb)
                                             and memory_budget_gb > 0):
        raise ConfigError("memory_budget_gb", memory_budget_gb, "must be > 0 GB, or None")


def _step_device(step_device: str | None) -> str:
    """Where the simulated step computes: "cpu", or the accelerator's kind."""
    if step_device is None:
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    kind = str(step_device).split(":")[0]
    if kind not in ("cpu", "cuda", "mps", "xpu"):
        raise ConfigError("step_device", step_device, "must be 'cpu' or an accelerator "
                          "('cuda', 'mps', 'xpu'), or None for this machine's")
    return kind


def _cost(trial: Trial) -> tuple[int, float, int]:
    """Cheapest first: fewest workers, then least memory, then the shallowest queue."""
    s = trial.setting
    return (s.num_workers, trial.memory_gb or 0.0, s.prefetch_factor or 0)


def _choose(trials: list[Trial], step_s: float | None) -> tuple[Trial, bool | None]:
    """The cheapest trial under the target (with its margin, else without), or the cheapest
    of the least waiting; without a step, the cheapest within 10% of the fastest."""
    if step_s is None:
        fastest = max(t.batches_per_s for t in trials)
        return min((t for t in trials if t.batches_per_s >= 0.9 * fastest), key=_cost), None
    for target_pct in (_SAFE_PCT, TARGET_WAIT_PCT):
        meeting = [t for t in trials if t.wait_pct is not None and t.wait_pct < target_pct]
        if meeting:
            return min(meeting, key=_cost), True
    least = min(t.wait_s_per_batch for t in trials)
    return min((t for t in trials if t.wait_s_per_batch <= least * 1.1), key=_cost), False


class TrialRunner(Protocol):
    """Runs one setting against the simulated step (:func:`run_trial`, or a test's fake)."""

    def __call__(self, setting: Setting, *, max_s: float, min_batches: int) -> Trial: ...


def tune_loader(
    dataset_or_loader: Any,
    *,
    batch_size: int | None = None,
    step_s: float | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    budget_s: float = 60,
    memory_budget_gb: float | None = None,
    progress: Progress | None = None,
    name: str | None = None,
    step_source: str | None = None,
    step_device: str | None = None,
    clock: TuneClock = HOST_CLOCK,
    trial_runner: TrialRunner | None = None,
) -> TuneResult:
    """Find the cheapest DataLoader settings that keep the data wait under 10% of a step.

    ``step_s`` is the training step's duration without its data wait (the time the loop
    spends outside ``next()``); the tuner spends that long between fetches as the training
    thread would: on a CPU run (``step_device="cpu"``) computing, which keeps the cores the
    step takes from the workers; on an accelerator (``"cuda"``, ``"mps"``) asleep, as the
    host waits while the device computes. ``step_device`` defaults to where PyTorch would
    train here: an accelerator when it sees one, else the CPU. Without ``step_s`` the tuner
    looks for the fastest loading instead.
    A DataLoader given here keeps its sampler, collate_fn, drop_last and batch size.
    ``memory_budget_gb`` defaults to half of the memory available now. ``clock`` and
    ``trial_runner`` are for tests: a manual clock, and a fake in place of real DataLoaders.
    """
    _validate(budget_s, step_s, memory_budget_gb)
    device = _step_device(step_device) if step_s is not None else None
    started_s = clock.wall()
    source = as_source(dataset_or_loader, batch_size=batch_size, collate_fn=collate_fn, name=name)
    budget_gb = memory_budget_gb if memory_budget_gb is not None else \
        psutil.virtual_memory().available / 2e9
    report_progress: Progress = progress or (lambda _message, _spent, _budget: None)
    report_progress("timing samples in this process", 0.0, budget_s)
    probe = run_probe(source, max_s=min(0.15 * budget_s, 10.0),
                      memory_budget_bytes=budget_gb * 1e9, clock=clock)
    if trial_runner is None:
        timeout_s = max(30.0, 20 * probe.batch_s)

        def trial_runner(setting: Setting, *, max_s: float, min_batches: int) -> Trial:
            return run_trial(source, setting, step_s=step_s, max_s=max_s,
                             min_batches=min_batches, timeout_s=timeout_s,
                             batch_bytes=probe.batch_bytes, cpu_step=device == "cpu",
                             clock=clock)

    return search(source, probe, trial_runner, step_s=step_s, step_device=device,
                  budget_s=budget_s,
                  budget_gb=budget_gb, cores=_usable_cpus(),
                  pin_memory=torch.cuda.is_available(), clock=clock, started_s=started_s,
                  report_progress=report_progress, step_source=step_source)


def search(
    source: LoaderSource,
    probe: Probe,
    trial_runner: TrialRunner,
    *,
    step_s: float | None,
    budget_s: float,
    budget_gb: float,
    cores: int | None,
    step_device: str | None = None,
    pin_memory: bool,
    clock: TuneClock,
    started_s: float,
    report_progress: Progress,
    step_source: str | None,
) -> TuneResult:
    """The search itself, from the probe on: which settings to try, and which to recommend.

    ``started_s`` is when the budget began on ``clock`` (the probe is part of it);
    ``pin_memory`` is whether the batches go to a CUDA device (pinning only pays then).
    """

    def spent() -> float:
        return clock.wall() - started_s

    if spent() + 2 * probe.batch_s > budget_s:
        raise ConfigError(
            "budget_s", budget_s,
            f"must leave time to load a few batches: one takes {probe.batch_s:.3g} s in one "
            f"process ({probe.sample_s:.3g} s a sample); give at least "
            f"{math.ceil(spent() + 6 * probe.batch_s)} s, or a smaller batch_size")
    trials: list[Trial] = []
    trial_cap_s = max(1.0, budget_s / 8)

    def target_met(trial: Trial, target_pct: float = _SAFE_PCT) -> bool:
        return trial.wait_pct is not None and trial.wait_pct < target_pct

    def estimate_s(workers: int, share: float) -> float:
        """The least time a trial needs to say something: start, warm-up, three batches."""
        parallel = max(1.0, min(workers, (cores or 1) / max(share, 0.02)))
        per_batch = max(step_s or 0.0, probe.batch_s / parallel)
        return 0.2 + 0.05 * workers + probe.batch_s + per_batch * (workers + 4)

    def trial_for(workers: int, prefetch: int = 2) -> Trial:
        setting = Setting(num_workers=workers, prefetch_factor=prefetch if workers else None,
                          pin_memory=pin_memory, persistent_workers=workers > 0)
        report_progress(f"trying {setting.label()}", spent(), budget_s)
        left = budget_s - spent()
        # no workers: the wait is the batch itself, a few batches tell it
        batches = max(30, 3 * workers) if workers else 10
        trial = trial_runner(setting, max_s=max(0.5, min(trial_cap_s, left)),
                             min_batches=batches)
        trials.append(trial)
        return trial

    def better(new: Trial, old: Trial) -> bool:
        if old.setting.num_workers == 0:
            return True  # one worker only moves the loading off the step: judge from two on
        if step_s is None:
            return new.batches_per_s > old.batches_per_s / _FALLING
        return new.wait_s_per_batch < _FALLING * old.wait_s_per_batch

    def fits(trial: Trial) -> bool:
        return trial.memory_gb is None or trial.memory_gb <= budget_gb

    cpu_share = probe.cpu_share
    size = max(1, round((probe.batch_s - probe.collate_s) / probe.sample_s)) \
        if probe.sample_s else 1
    io_s_per_batch = probe.sample_wait_s * size
    stopped_by: str | None = None
    last = trial_for(0)
    workers = 1
    lo = 0
    while not target_met(last) or step_s is None:
        bound = "cpu" if cpu_share >= _CPU_BOUND_SHARE else "io"
        limit = (cores or 1) if bound == "cpu" else min(
            _MAX_WORKERS, max(cores or 1, math.floor((cores or 1) / max(cpu_share, 1e-3))))
        if workers > limit:
            if lo < limit:
                workers = limit  # one try at the limit itself before stopping
            else:
                stopped_by = (f"{limit} workers use the {cores} cores" if bound == "cpu" else
                              f"the limit of {limit} workers")
                break
        if spent() + estimate_s(workers, cpu_share) > budget_s:
            stopped_by = f"the time budget ({budget_s:g} s)"
            break
        per_worker_gb = (last.memory_gb or 0.0) / max(1, last.setting.num_workers)
        if last.setting.num_workers and per_worker_gb * workers > budget_gb:
            fit = math.floor(budget_gb / per_worker_gb) if per_worker_gb else workers
            if fit <= lo:
                stopped_by = f"the memory budget ({budget_gb:.3g} GB)"
                break
            workers = fit
        trial = trial_for(workers)
        cpu_batch = trial.worker_cpu_s_per_batch
        if cpu_batch is not None and cpu_batch + io_s_per_batch > 0:
            # the workers' own CPU per batch against the waiting a batch does (from the probe)
            cpu_share = min(cpu_batch / (cpu_batch + io_s_per_batch), 1.0)
        if not fits(trial):
            stopped_by = f"the memory budget ({budget_gb:.3g} GB)"
            break
        if target_met(trial):
            last = trial
            break
        if not better(trial, last):
            last = trial
            stopped_by = f"the wait stopped falling at {workers} workers"
            break
        lo, last = workers, trial
        if workers == limit:
            stopped_by = f"the limit of {limit} workers"
            break
        workers *= 2
    # Refine: the fewest workers between the last failing count and the first that succeeded.
    hi = last.setting.num_workers
    if target_met(last) and step_s is not None:
        while hi - lo > 1 and spent() + estimate_s((lo + hi) // 2, cpu_share) <= budget_s:
            mid = (lo + hi) // 2
            trial = trial_for(mid)
            if target_met(trial) and fits(trial):
                hi = mid
            else:
                lo = mid
        # A deeper queue absorbs uneven samples: can it save a worker?
        if hi >= 2 and spent() + estimate_s(hi - 1, cpu_share) <= budget_s:
            trial_for(hi - 1, prefetch=4)

    chosen, reachable = _choose([t for t in trials if fits(t) and t.batches > 0] or trials,
                                step_s)
    recommended = chosen.setting
    bound_now: Bound = "cpu" if cpu_share >= _CPU_BOUND_SHARE else "io"
    startup = chosen.startup_s if recommended.num_workers else None
    verdict = adv.verdict_text(recommended=recommended, trial=chosen, reachable=reachable,
                               step_s=step_s, probe=probe, startup_s=startup)
    advice: list[str] = []
    if reachable is False and step_s is not None:
        worker_cpu = chosen.worker_cpu_s_per_batch if recommended.num_workers else None
        advice = adv.unreachable_advice(probe=probe, best=chosen, step_s=step_s,
                                        bound=bound_now, cores=cores, cpu_s_per_batch=worker_cpu,
                                        stopped_by=stopped_by)
    if probe.sample_runq_s > 0.15 * probe.sample_s:
        advice.append(
            f"the machine is busy: a sample waited {100 * probe.sample_runq_s / probe.sample_s:.0f}"
            "% of its time for a core (other processes); the figures hold for this load — "
            "tune again when the machine is as it will be in training")
    report_progress("done", spent(), budget_s)
    return TuneResult(
        recommended=recommended, wait_pct=chosen.wait_pct, reachable=reachable, step_s=step_s,
        step_source=step_source or ("given" if step_s is not None else None),
        step_device=step_device,
        batch_size=source.batch_size, probe=probe, trials=trials, bound=bound_now, cores=cores,
        memory_budget_gb=budget_gb, budget_s=float(budget_s), elapsed_s=spent(),
        verdict=verdict, advice=advice,
        code=adv.loader_line(recommended, source.batch_size, source.kept, source.collate_fn))
