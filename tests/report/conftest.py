"""A hand-made run: step records with known waits, a periodic stall, a loss curve, sampler rows."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest

from trainpace.diagnosis import diagnose
from trainpace.summary import Data, Device, Steps, Summary, Target, Throughput, Time


@dataclass
class Run:
    summary: Summary
    steps: list[dict[str, Any]]
    system: list[dict[str, Any]]
    meta: dict[str, Any]


def make_run(n: int = 200, *, name: str = "exp1", stall_every: int = 50) -> Run:
    steps, t = [], 0.0
    for i in range(1, n + 1):
        wait = 0.03 + (0.3 if i % stall_every == 0 else 0.0)
        step = 0.07 + wait
        t += step
        steps.append({"step": i, "t_s": t, "step_s": step, "wait_s": wait, "h2d_s": None,
                      "samples": 32, "tokens": None, "warmup": i <= 3, "loss": 3.0 / (1 + i / 20)})
    system = [{"t_s": k * 0.5, "device_util_pct": 55.0 + k % 7, "memory_used_pct": 41.0,
               "temperature_c": None, "bandwidth_util_pct": None} for k in range(int(t * 2))]
    summary = Summary(
        run_id=name,
        steps=Steps(total=n, warmup=3, measured=n - 3),
        throughput=Throughput(samples_per_s=320.0, steps_per_s=10.0),
        time=Time(wall_s=t, measured_s=t, step_s_median=0.1, step_s_p90=0.1,
                  target=Target(name="loss", value=0.5, higher_is_better=False)),
        data=Data(wait_pct=30.0, wait_s_per_step=0.03, loader={"num_workers": 0}),
        device=Device(kind="cpu", name="test cpu", util_pct=58.0, memory_used_pct=41.0),
    )
    meta = {"loader": {"num_workers": 0}, "config": {"smoothing": 0.9}}
    summary = dataclasses.replace(summary, diagnosis=diagnose(summary, steps=steps, system=system,
                                                              meta=meta))
    return Run(summary, steps, system, meta)


@pytest.fixture
def run() -> Run:
    return make_run()
