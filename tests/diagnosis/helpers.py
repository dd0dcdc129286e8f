"""Hand-made inputs for the rule tests: step records, a rule context."""

from trainpace.diagnosis._context import Context
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.summary import Summary


def records(step_s, wait_s=None, warmup=0):
    wait_s = wait_s or [0.0] * len(step_s)
    out, t = [], 0.0
    for i, (s, w) in enumerate(zip(step_s, wait_s, strict=False), start=1):
        t += s
        out.append({"step": i, "t_s": t, "step_s": s, "wait_s": w, "samples": 8, "warmup": i <= warmup})
    return out


def ctx(summary=None, steps=None, system=None, meta=None, **thresholds):
    return Context(summary or Summary(), steps, system, meta or {}, Thresholds(**thresholds))


def only(outcome):
    assert len(outcome.verdicts) == 1, outcome
    return outcome.verdicts[0]


def host_rows(until_s, system_cpu_pct, process_cpu_pct, rss_gb, start_s=0.0, every_s=1.0):
    """Sampler rows (system.jsonl's shape) every ``every_s`` from ``start_s`` to ``until_s``."""
    out, t = [], start_s
    while t < until_s - 1e-9:
        t += every_s
        out.append({"t_s": t, "host": {"system_cpu_pct": system_cpu_pct,
                                       "process_cpu_pct": process_cpu_pct, "rss_gb": rss_gb}})
    return out
