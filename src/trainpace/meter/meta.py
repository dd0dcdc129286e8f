"""``meta.json``: the run's settings (from :class:`MeterConfig`), its machine and its place
in a distributed job; :class:`MetaLog` makes it again whenever something in it changes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import socket
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainpace._version import __version__
from trainpace.config import MeterConfig
from trainpace.devices.ceilings import FirstRun, cpu_name
from trainpace.dist.ranks import rank_info
from trainpace.measure.recorder import StepRecorder
from trainpace.measure.summarize import Goal
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.probes import StepProbes
from trainpace.runlog import META_SCHEMA, Record
from trainpace.sinks.background import Writer
from trainpace.sinks.base import FanOut


def process_ranks(env: Mapping[str, str] | None = None) -> dict[str, int | None]:
    """``world_size``, ``rank``, ``local_rank`` and ``node`` of this process (see
    :func:`trainpace.dist.ranks.rank_info`: torchrun's variables, else torch.distributed, else
    a single process)."""
    info = rank_info(env)
    return {"world_size": info.world_size, "rank": info.rank, "local_rank": info.local_rank,
            "node": info.node}


# Which front-end made the Meter (meta.json's ``made_by``): the diagnosis names that front-end's
# way to change a setting (a `trainpace run` flag, a callback's keyword, a Meter keyword).
MADE_BY = ("meter", "run", "demo", "lightning", "hf")


def run_meta(*, config: MeterConfig, made_by: str, run_id: str, started_at: dt.datetime,
             argv: list[str], finished: bool,
             device: torch.device, device_name: str | None, clock: str,
             goal: Goal | None, loader: dict[str, Any] | None, tokens_counted: str | None,
             vitals: dict[str, Any] | None, profile: dict[str, Any] | None,
             sinks: dict[str, Any] | None) -> dict[str, Any]:
    """The run's meta record (written again whenever something in it changes)."""
    return {
        "schema": META_SCHEMA,
        "run_id": run_id,
        "made_by": made_by,
        "started_at": started_at.isoformat(),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat() if finished else None,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": argv,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "trainpace": __version__,
        },
        "device": {"kind": device.type, "index": device.index, "name": device_name},
        "clock": clock,
        **process_ranks(),
        "cpu_count": usable_cpus(),
        "config": config.meta(),
        "target": dataclasses.asdict(goal) if goal is not None else None,
        "loader": loader,
        "tokens_counted": tokens_counted,
        "vitals": vitals,
        "profile": profile,
        "sinks": sinks,
    }


def usable_cpus() -> int | None:
    """CPUs this process may run on (its affinity), which bounds useful DataLoader workers."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()


def device_name(device: torch.device) -> str | None:
    """The device's model name, for meta.json and the summary (None where not known)."""
    try:
        if device.type == "cuda" and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(device))
        if device.type == "cpu":
            return cpu_name()
    except Exception:  # noqa: BLE001 - a name is nice to have, never required
        return None
    return None


class MetaLog:
    """The run's meta record as the run goes: made again from the run's parts whenever
    something in it changes (a loader's settings, the goal, the tokens counted, a front-end's
    note, the end), and written in order with the windows by the writer thread (at once, once
    that is closed). ``goal``, ``loader``, ``vitals`` and ``ceilings`` read the latest of each.
    """

    def __init__(self, *, config: MeterConfig, made_by: str, run_id: str,
                 started_at: dt.datetime, argv: list[str], device: torch.device,
                 recorder: StepRecorder, probes: StepProbes, sinks: FanOut, writer: Writer,
                 emit: Callable[[Record], None], goal: Callable[[], Goal | None],
                 loader: Callable[[], dict[str, Any] | None],
                 vitals: Callable[[], DeviceVitals | None],
                 ceilings: Callable[[], FirstRun | None]) -> None:
        self._config = config
        self._made_by = made_by
        self._run_id = run_id
        self._started_at = started_at
        self._argv = argv
        self._device = device
        self._recorder = recorder
        self._probes = probes
        self._sinks = sinks
        self._writer = writer
        self._emit = emit
        self._goal = goal
        self._loader = loader
        self._vitals = vitals
        self._ceilings = ceilings
        self.last: dict[str, Any] = {}  # the record made last
        self.notes: dict[str, dict[str, Any]] = {}  # see note()

    def note(self, key: str, facts: Mapping[str, Any] | None) -> None:
        """Keep ``facts`` under ``key`` (None removes them); a key of the Meter's own meta
        is refused with ValueError."""
        if key in self.last and key not in self.notes:
            raise ValueError(f"meta.json's {key!r} is the Meter's own; note under another key")
        if facts is None:
            self.notes.pop(key, None)
        else:
            self.notes[key] = dict(facts)
        self.log()

    def log(self, *, finished: bool = False) -> None:
        rec, profile = self._recorder, self._probes.profile
        vitals, ceilings = self._vitals(), self._ceilings()
        meta = run_meta(
            config=self._config, made_by=self._made_by, run_id=self._run_id,
            started_at=self._started_at, argv=self._argv,
            finished=finished, device=self._device, device_name=device_name(self._device),
            clock=rec.timer.name if rec.timer is not None else "host",
            goal=self._goal(),
            loader=self._loader(), tokens_counted=rec.tokens_counted,
            vitals=vitals.meta() if vitals is not None else None,
            profile=None if profile is None else {
                "steps": [profile.start_step, profile.stop_step],
                "trace": str(profile.trace_path) if profile.trace_path else None},
            sinks=self._sinks.counts(),
        )
        meta["ceilings"] = ceilings.to_dict() if ceilings is not None else None
        meta.update(self.notes)
        self.last = meta
        record = Record("meta", meta, rec.steps_closed)
        if self._writer.closed:
            self._emit(record)
        else:
            self._writer.submit(self._emit, record)
