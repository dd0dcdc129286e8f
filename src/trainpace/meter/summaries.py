"""The summaries of a run: the refreshes during it, and its end (ceilings, profile, diagnosis).

The Meter's writer thread asks for a refreshed summary now and then; ``finish()`` asks for the
final one, after measuring a quick ceiling where no peak is known, joining the profiled
steps' trace evidence and diagnosing the run (with the loader tuner's measured settings when
``tune_loader_s`` is set). The Meter owns the lifetimes; this object owns the logic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from trainpace.devices.ceilings import FirstRun, ensure_ceilings
from trainpace.devices.specs import canonical_dtype
from trainpace.diagnosis import diagnose
from trainpace.dist.publication import JobSteps
from trainpace.job.goodput import goodput
from trainpace.job.ledger import read_job
from trainpace.measure.recorder import StepRecorder
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.distributed import JobRank
from trainpace.meter.log_once import LogOnce
from trainpace.meter.probes import StepProbes
from trainpace.meter.state import RunState
from trainpace.runlog import Record, RunData
from trainpace.summary import Diagnosis, Summary
from trainpace.trace.evidence import with_trace_evidence
from trainpace.tune.hint import tune_advice


class Summaries:
    """Builds the run's summaries from its parts (none of which it owns)."""

    def __init__(self, *, recorder: StepRecorder, state: RunState, job: JobRank,
                 probes: StepProbes, log_once: LogOnce, device: torch.device,
                 vitals: Callable[[], DeviceVitals | None], peaks_given: bool,
                 tune_loader_s: float | None) -> None:
        self._recorder = recorder
        self._state = state
        self._job = job
        self._probes = probes
        self._log_once = log_once
        self._device = device
        self._vitals = vitals
        self._peaks_given = peaks_given
        self._tune_loader_s = tune_loader_s
        self.ceilings: FirstRun | None = None  # what the end did to know the peaks
        self.dataloader: Any = None  # with tune_loader_s: the loop's DataLoader

    def refresh(self, now: float) -> Summary:
        """A mid-run summary (writer thread)."""
        return self.build(final=False, end_s=now)

    def build(self, *, final: bool, end_s: float) -> Summary:
        rec = self._recorder
        return self._job.own_summary(self._state.summary(
            final=final, end_s=end_s, t0=rec.t0,
            clock=rec.timer.name if rec.timer is not None else "host",
            tokens_counted=rec.tokens_counted, vitals=self._vitals()))

    def first_ceilings(self) -> None:
        """Where no peak is known for this device and thread count, measure a quick ceiling
        once, after the loop (never during it), and read the peaks again."""
        vitals = self._vitals()
        if vitals is None or self._peaks_given or self._device.type not in ("cpu", "cuda"):
            return
        count = vitals.step_count
        try:
            dtype = canonical_dtype(count.dtype) if count and count.dtype else None
        except Exception:  # noqa: BLE001 - an integer step: float32's peak is the one asked
            dtype = None
        self.ceilings = ensure_ceilings(self._device, threads=vitals.threads, dtype=dtype,
                                        achieved=vitals.achieved)
        if self.ceilings.peaks_changed:
            vitals.refresh_peaks()

    def with_profile(self, summary: Summary, emit: Callable[[Record], None]) -> Summary:
        """The profiled steps' trace analysis; its kernel (and communication) evidence joins."""
        analysis = self._probes.analyze()
        if analysis is None:
            return summary
        emit(Record("profile", analysis.to_dict(), self._recorder.steps_closed))
        return with_trace_evidence(summary, analysis.summary)

    def with_goodput(self, summary: Summary, job_folder: Path,
                     meta: Mapping[str, Any]) -> Summary:
        """The job's goodput so far (this run ended in its ledger): the earlier runs and the
        ledger read back from the job's folder, this run's steps from memory (never read
        back from its steps.jsonl)."""
        this_run = RunData(path=job_folder, meta=dict(meta), series=self._state.series,
                           summary=summary)
        try:
            return dataclasses.replace(summary,
                                       goodput=goodput(read_job(job_folder, top=this_run)))
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("computing the job's goodput", exc)
            return summary

    def diagnosed(self, summary: Summary, meta: Mapping[str, Any], *,
                  tune: bool = True, steps: JobSteps | None = None) -> Summary:
        """``summary`` diagnosed over this process's steps, or a job's (``steps``: those of
        the rank whose steps stand for the job, read from its folder)."""
        if "config" not in meta:
            # a job's merged meta without its ranks' setup: the steps diagnosed were made in
            # windows of this Meter's size (every rank's), whose period is trainpace's
            meta = {**meta, "config": {"window": self._state.config.window}}
        try:
            diagnosis = diagnose(
                summary, steps=self._state.series if steps is None else steps.series,
                system=self._state.system_rows if steps is None else steps.system, meta=meta)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("diagnosing the run", exc)
            return summary
        if tune and self.dataloader is not None:
            diagnosis = self._tuned(summary, diagnosis)
        return dataclasses.replace(summary, diagnosis=diagnosis)

    def _tuned(self, summary: Summary, diagnosis: Diagnosis) -> Diagnosis:
        """The data_wait finding with the tuner's measured settings for the loop's loader."""
        step_s, wait_s = summary.time.step_s_median, summary.data.wait_s_per_step
        budget_s = self._tune_loader_s
        if step_s is None or wait_s is None or budget_s is None or step_s <= wait_s:
            return diagnosis
        findings = []
        for finding in diagnosis.findings:
            if finding.id == "data_wait" and finding.severity != "info":
                measured = tune_advice(self.dataloader, step_s=step_s - wait_s,
                                       budget_s=budget_s, step_device=self._device.type)
                finding = dataclasses.replace(finding, advice=[*measured, *finding.advice])
            findings.append(finding)
        return dataclasses.replace(diagnosis, findings=findings)
