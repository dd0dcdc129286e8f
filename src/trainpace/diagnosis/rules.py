"""The diagnosis rules, in the order an expert checks them (DESIGN.md).

Step-time anomalies → throughput vs what the hardware allows → device and bandwidth
utilization → data loading → host overhead → communication and rank imbalance → a job's
goodput (when a job was read). Each rule is a small pure function of a :class:`Context`
returning an :class:`Outcome`: findings with their evidence (the numbers) and advice computed
from them, or what it checked, or why it could not.
"""

from __future__ import annotations

from collections.abc import Callable

from trainpace.diagnosis._context import Context, Outcome
from trainpace.diagnosis.anomalies import loss_finite, step_outliers
from trainpace.diagnosis.badput import job_goodput
from trainpace.diagnosis.communication import communication, ranks
from trainpace.diagnosis.drift import drift
from trainpace.diagnosis.hardware import device_util, hardware, memory, thermal
from trainpace.diagnosis.loading import data_wait
from trainpace.diagnosis.overhead import framework_work, host_overhead
from trainpace.diagnosis.phases import outside_steps, slow_phases

Rule = Callable[[Context], Outcome]


RULES: tuple[tuple[str, Rule], ...] = (
    ("slow phases", slow_phases),
    ("step-time outliers", step_outliers),
    ("step-time drift", drift),
    ("loss", loss_finite),
    ("time outside steps", outside_steps),
    ("framework work", framework_work),
    ("roofline and bandwidth", hardware),
    ("device utilization", device_util),
    ("device memory", memory),
    ("thermal", thermal),
    ("data loading", data_wait),
    ("host overhead", host_overhead),
    ("communication", communication),
    ("rank imbalance", ranks),
    ("job goodput", job_goodput),
)
"""(name, rule) in the expert's order; :func:`trainpace.diagnosis.diagnose` runs them all."""

