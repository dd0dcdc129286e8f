"""Do trainpace's figures match an independent timer of the same loop, its own time included?

A real loop of ~1 ms steps (a sleep, as a host waits for a GPU) over padded text batches
pulled through ``meter.loader`` (a small fetch delay per batch, so the wait is not zero) runs
under a Meter with a short window (many window boundaries, where trainpace does its own work
on the training thread). Beside it, the loop keeps its own ``time.perf_counter`` at each step's
end and around each fetch. Over the same measured steps (those after trainpace's warm-up):

- steps' sum / t_s span: trainpace's step times against its own clock's span (1: nothing
  of the loop's time is left out of the steps);
- samples/s, tokens/s: trainpace's over the independent timer's;
- wait: trainpace's wait_pct minus the independent one (the loader's own time, timed inside
  the iterable the Meter wraps), in points.

The steps' time leaves out, by design, the time between a step's end and its next fetch
(``outside_s``: an evaluation, a checkpoint; here the loop's own few µs of bookkeeping), so
samples/s over the wall time of the same steps is that much above 1.

    python benchmarks/steptruth.py                      # this tree
    PYTHONPATH=../base/src python benchmarks/steptruth.py  # another checkout, to compare
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def padded_batches(n: int, fetch_s: float) -> Any:
    import torch

    for i in range(n):
        time.sleep(fetch_s)  # the loader's own work: the wait trainpace measures
        length = 8 + i % 8
        mask = torch.zeros(4, 16, dtype=torch.long)
        mask[:, :length] = 1
        yield {"input_ids": torch.ones(4, 16, dtype=torch.long), "attention_mask": mask}


def run(steps: int, window: int, step_s: float, fetch_s: float) -> dict[str, Any]:
    import trainpace
    from trainpace.runlog import read_run

    out = Path(tempfile.mkdtemp()) / "run"
    ends: list[float] = []
    waits: list[float] = []
    clock = time.perf_counter
    with open(os.devnull, "w") as devnull:
        meter = trainpace.Meter(out, window=window, stream=devnull, report=False)
        loader = padded_batches(steps, fetch_s)

        def timed() -> Any:  # the loader's own time: what the loop waits for
            while True:
                fetch = clock()
                try:
                    batch = next(loader)
                except StopIteration:
                    return
                waits.append(clock() - fetch)
                yield batch

        started = clock()
        for batch in meter.loader(timed()):
            with meter.step(batch):
                time.sleep(step_s)
            ends.append(clock())
        loop_s = clock() - started
        summary = meter.finish()
    records = read_run(meter.path).steps
    warmup = summary.steps.warmup
    measured = records[warmup:]
    truth_s = ends[-1] - ends[warmup - 1] if warmup else ends[-1] - started
    samples = sum(r["samples"] for r in measured)
    tokens = sum(r["tokens"] for r in measured)
    t_s = [r["t_s"] for r in records]
    span_s = t_s[-1] - (t_s[warmup - 1] if warmup else 0.0)
    step_sum_s = sum(r["step_s"] for r in measured)
    outside_s = sum(r["outside_s"] or 0.0 for r in measured)
    truth_wait_pct = 100.0 * sum(waits[warmup:]) / truth_s
    return {
        "trainpace": str(Path(trainpace.__file__).parent),
        "steps": len(records), "warmup": warmup,
        "steps_sum_over_t_s_span": (step_sum_s + outside_s) / span_s,
        "t_s_span_over_perf_counter": span_s / truth_s,
        "samples_per_s_over_truth": summary.throughput.samples_per_s / (samples / truth_s),
        "tokens_per_s_over_truth": summary.throughput.tokens_per_s / (tokens / truth_s),
        "wait_pct_minus_truth_points": summary.data.wait_pct - truth_wait_pct,
        "loop_s": loop_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--fetch-ms", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = [run(args.steps, args.window, args.step_ms / 1e3, args.fetch_ms / 1e3)
            for _ in range(args.runs)]
    print(f"trainpace from {rows[0]['trainpace']}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for key in ("steps_sum_over_t_s_span", "t_s_span_over_perf_counter",
                "samples_per_s_over_truth", "tokens_per_s_over_truth",
                "wait_pct_minus_truth_points"):
        print(f"  {key:<30} " + "  ".join(f"{row[key]:.4f}" for row in rows))
    print(json.dumps(rows), file=sys.stderr)
    if rows[0]["trainpace"] == str(Path(__file__).resolve().parents[1] / "src" / "trainpace"):
        from results import write_result  # this tree's figures only, for its documentation

        write_result("steptruth", quick=args.runs < 3, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
