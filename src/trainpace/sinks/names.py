"""One metric naming for every sink and framework logger: TensorBoard, W&B, MLflow, Prometheus,
the Lightning loggers and the Hugging Face ``logs``.

A tag is ``trainpace/group/name_unit`` (``trainpace/throughput/samples_per_s``): every figure lives
under trainpace's own namespace, never in a series the user or the framework owns (``train/loss``
is theirs; trainpace's window mean of it is ``trainpace/loss/window_mean``). Prometheus, whose
names cannot hold a ``/``, gets ``trainpace_throughput_samples_per_s``. Figures that were not
measured (None) are no point at all, never a zero.

Under DDP the tags are the job's figures (rank 0 shows the merged window). One rank's own
figures, where asked for (``Meter(rank_figures=True)``), are under ``trainpace/rank{r}/``
(``trainpace/rank1/throughput/samples_per_s``); Prometheus puts them in its ``rank`` label
instead (``rank="1"``; the job's figures are ``rank="job"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# window figure -> (tag, multiplier); the tag carries the unit.
WINDOW_TAGS: dict[str, tuple[str, float]] = {
    "samples_per_s": ("trainpace/throughput/samples_per_s", 1.0),
    "tokens_per_s": ("trainpace/throughput/tokens_per_s", 1.0),
    "steps_per_s": ("trainpace/throughput/steps_per_s", 1.0),
    "step_s_median": ("trainpace/time/step_median_ms", 1e3),
    "step_s_p90": ("trainpace/time/step_p90_ms", 1e3),
    "wait_pct": ("trainpace/data/wait_pct", 1.0),
    "device_util_pct": ("trainpace/device/util_pct", 1.0),
    "memory_used_pct": ("trainpace/device/memory_used_pct", 1.0),
    "temperature_c": ("trainpace/device/temperature_c", 1.0),
    "bandwidth_util_pct": ("trainpace/bandwidth/util_pct", 1.0),
    "loss": ("trainpace/loss/window_mean", 1.0),
    "eta_to_target_s": ("trainpace/time/eta_to_target_s", 1.0),
    "usd_per_million_samples": ("trainpace/cost/usd_per_million_samples", 1.0),
    "usd_per_million_tokens": ("trainpace/cost/usd_per_million_tokens", 1.0),
    "ranks": ("trainpace/job/ranks_reporting", 1.0),  # a distributed job's window only
}

# (section, key of summary.json) -> (tag, multiplier): the run's figures at its end. The tags a
# window also has mean the same thing over the whole run (past warm-up).
SUMMARY_TAGS: dict[tuple[str, str], tuple[str, float]] = {
    ("throughput", "samples_per_s"): ("trainpace/throughput/samples_per_s", 1.0),
    ("throughput", "tokens_per_s"): ("trainpace/throughput/tokens_per_s", 1.0),
    ("throughput", "steps_per_s"): ("trainpace/throughput/steps_per_s", 1.0),
    ("time", "step_s_median"): ("trainpace/time/step_median_ms", 1e3),
    ("time", "step_s_p90"): ("trainpace/time/step_p90_ms", 1e3),
    ("time", "wall_s"): ("trainpace/time/wall_s", 1.0),
    ("time", "time_to_target_s"): ("trainpace/time/to_target_s", 1.0),
    ("time", "outside_steps_pct"): ("trainpace/time/outside_steps_pct", 1.0),
    ("data", "wait_pct"): ("trainpace/data/wait_pct", 1.0),
    ("device", "util_pct"): ("trainpace/device/util_pct", 1.0),
    ("device", "memory_used_pct"): ("trainpace/device/memory_used_pct", 1.0),
    ("device", "temperature_c"): ("trainpace/device/temperature_c", 1.0),
    ("bandwidth", "util_pct"): ("trainpace/bandwidth/util_pct", 1.0),
    ("flops", "achieved_tflops"): ("trainpace/flops/achieved_tflops", 1.0),
    ("flops", "mfu_pct"): ("trainpace/flops/mfu_pct", 1.0),
    ("cost", "usd_total"): ("trainpace/cost/usd_total", 1.0),
    ("cost", "usd_per_million_samples"): ("trainpace/cost/usd_per_million_samples", 1.0),
    ("cost", "usd_per_million_tokens"): ("trainpace/cost/usd_per_million_tokens", 1.0),
    ("cost", "usd_to_target"): ("trainpace/cost/usd_to_target", 1.0),
    ("cost", "energy_j_per_sample"): ("trainpace/cost/energy_j_per_sample", 1.0),
    ("cost", "power_w_mean"): ("trainpace/cost/power_w", 1.0),
    ("cost", "kwh"): ("trainpace/cost/kwh", 1.0),
    ("cost", "co2_kg"): ("trainpace/cost/co2_kg", 1.0),
    # a job's goodput (summary.goodput: `trainpace report JOB`, or a Meter that reads its job)
    ("goodput", "pct"): ("trainpace/goodput/pct", 1.0),
    ("goodput", "wall_s"): ("trainpace/goodput/wall_s", 1.0),
    ("goodput.categories", "lost_steps"): ("trainpace/goodput/lost_steps", 1.0),
    **{("goodput.shares_pct", name): (f"trainpace/goodput/{name}_pct", 1.0) for name in (
        "startup", "warmup_excess", "data_wait", "evaluation", "checkpoint_save",
        "checkpoint_load", "lost_progress", "restart_gap", "teardown", "other")},
}

STEP_TAG = "trainpace/step"
"""The optimizer step a point belongs to, for loggers whose own step counter is not ours (W&B)."""
BOTTLENECK_TAG = "trainpace/diagnosis/bottleneck"
"""The diagnosis' verdict (a string), in the summaries that take one."""


RANK_PREFIX = "trainpace/rank"
"""Per-rank figures: ``trainpace/rank{r}/...`` (see :func:`rank_tag`)."""
JOB_LABEL = "job"
"""Prometheus' ``rank`` label of the job's own figures (one rank's is its number)."""


def window_scalars(figures: Mapping[str, Any]) -> dict[str, float]:
    """``{tag: value}`` of one window's measured figures, and of each rank's own figures
    when the window carries them (``rank_figures``: rank -> figures, at ``rank{r}/`` tags)."""
    out = _scalars((figures.get(key), tag, scale) for key, (tag, scale) in WINDOW_TAGS.items())
    for rank, own in (figures.get("rank_figures") or {}).items():
        out.update({rank_tag(tag, int(rank)): value
                    for tag, value in window_scalars(own).items()})
    return out


def rank_tag(tag: str, rank: int) -> str:
    """``trainpace/throughput/samples_per_s``, 1 -> ``trainpace/rank1/throughput/samples_per_s``."""
    return f"{RANK_PREFIX}{rank}/{tag.removeprefix('trainpace/')}"


def split_rank(tag: str) -> tuple[str, int | None]:
    """:func:`rank_tag` undone: (the job's tag, the rank), the rank None for a job's tag."""
    head, _, rest = tag.partition("/")
    number = rest.partition("/")[0].removeprefix("rank")
    if head == "trainpace" and rest.startswith("rank") and number.isascii() and number.isdigit():
        return f"trainpace/{rest.partition('/')[2]}", int(number)
    return tag, None


def summary_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """``{tag: value}`` of a ``trainpace.summary/1`` dict's measured headline figures."""
    return _scalars(
        (_section(summary, section).get(key), tag, scale)
        for (section, key), (tag, scale) in SUMMARY_TAGS.items()
    )


def _section(summary: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
    """``summary["goodput"]["shares_pct"]`` for ``"goodput.shares_pct"``; {} where absent."""
    found: Any = summary
    for part in dotted.split("."):
        found = found.get(part) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def bottleneck(summary: Mapping[str, Any]) -> str | None:
    """The summary's diagnosed bottleneck, if any."""
    found = (summary.get("diagnosis") or {}).get("bottleneck")
    return str(found) if found is not None else None


def prometheus_name(tag: str) -> str:
    """``trainpace/throughput/samples_per_s`` -> ``trainpace_throughput_samples_per_s``
    (``trainpace/step`` -> ``trainpace_step``)."""
    return "trainpace_" + tag.removeprefix("trainpace/").replace("/", "_")


def window_step(figures: Mapping[str, Any], default: int) -> int:
    """The optimizer step a window's point is drawn at: its last step."""
    last = figures.get("last_step")
    return int(last) if last is not None else default


def _scalars(items: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for value, tag, scale in items:
        if value is None or isinstance(value, bool):
            continue
        number = float(value) * scale
        if math.isfinite(number):
            out[tag] = number
    return out
