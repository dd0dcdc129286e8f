"""The run folder against a slow sink and tiny steps: what a SIGKILL loses, what memory does.

A loop of ~10 µs steps (a busy wait, holding the GIL as a Python-heavy step does) runs in a
child process under a Meter with a sink that sleeps 1 s per record, the worst sink a user
can give. Two measurements:

- **kills**: the child is killed with SIGKILL at a random moment; the steps it had done (a
  counter in shared memory, updated each step) against the steps its run folder holds.
  The promise: at most one window is lost (the open half window and the half being
  written: the loop hands its steps to the writer twice a window).
- **memory**: the same loop runs for a while with the slow sink and with no sink (in turns,
  as the machine's load changes); the child's RSS is read every half second. The promise: bounded (the slow sink's queue is
  bounded), so both grow alike (the steps kept as columns: ~0.1 kB a step).

    python benchmarks/writer.py            # 8 kills, 2 x 15 s memory runs per sink
    python benchmarks/writer.py --quick    # 4 kills, 6 s memory runs
"""

from __future__ import annotations

import argparse
import json
import mmap
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WINDOW = 100
STEP_S = 10e-6

CHILD = """
import itertools, mmap, os, sys, time
from pathlib import Path
import torch
import trainpace

out, counter, sink, seconds, window = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
step_s = float(sys.argv[6])

class Sleepy:
    def log(self, record): time.sleep(1.0)
    def close(self): pass

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

handle = open(counter, "r+b")
done = mmap.mmap(handle.fileno(), 8)
meter = trainpace.Meter(out, window=window, console=False, report=False, count_flops=False,
                        sinks=[Sleepy()] if sink == "slow" else [], sink_timeout_s=1.0)
rss, n = [], 0
started = time.perf_counter()
next_read = started
clock = time.perf_counter
for b in meter.loader(itertools.repeat(torch.zeros(32, 16))):
    with meter.step(b):
        end = clock() + step_s
        while clock() < end:
            pass
    n += 1
    done[:8] = n.to_bytes(8, "little")
    now = clock()
    if now >= next_read:
        rss.append((round(now - started, 2), n, rss_mb()))
        next_read = now + 0.5
        if seconds and now - started > seconds:
            break
finish_started = clock()
meter.finish()
print({"rss": rss, "steps": n, "finish_s": clock() - finish_started, "loop_s": finish_started - started})
"""


def child(out: Path, counter: Path, sink: str, seconds: float) -> subprocess.Popen[str]:
    counter.write_bytes(b"\0" * 8)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), str(counter), sink, str(seconds), str(WINDOW),
         str(STEP_S)], stdout=subprocess.PIPE, text=True)


def read_counter(counter: Path) -> int:
    with open(counter, "r+b") as handle, mmap.mmap(handle.fileno(), 8) as done:
        return int.from_bytes(done[:8], "little")


def lines(path: Path) -> int:
    try:
        with open(path / "steps.jsonl", "rb") as handle:
            return handle.read().count(b"\n")
    except FileNotFoundError:
        return 0


def kills(tmp: Path, count: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        counter, out = tmp / f"counter{i}", tmp / f"kill{i}"
        proc = child(out, counter, "slow", 0.0)
        deadline = time.monotonic() + 120
        while read_counter(counter) < 1000:  # the loop is running
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the child loop did not start")
            time.sleep(0.05)
        time.sleep(rng.uniform(0.5, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        done, recovered = read_counter(counter), lines(out)
        rows.append({"done": done, "recovered": recovered, "lost": done - recovered,
                     "lost_windows": (done - recovered) / WINDOW})
        print(f"  kill {i + 1}: {done:>9,} steps done, {recovered:>9,} on disk, lost "
              f"{done - recovered:>4} ({(done - recovered) / WINDOW:.2f} windows)", file=sys.stderr)
    return rows


def memory(tmp: Path, seconds: float, rounds: int) -> dict[str, Any]:
    """Each sink setting ``rounds`` times, alternating (the machine's load changes)."""
    import ast

    runs: dict[str, list[dict[str, Any]]] = {"none": [], "slow": []}
    for r in range(rounds):
        for sink in ("none", "slow"):
            name = f"mem-{sink}-{r}"
            proc = child(tmp / name, tmp / f"counter-{name}", sink, seconds)
            stdout, _ = proc.communicate(timeout=seconds + 120)
            figures = ast.literal_eval(stdout.strip().splitlines()[-1])
            rss = figures["rss"]
            first = rss[min(2, len(rss) - 1)]  # after the first second (imports, warm-up)
            last = rss[-1]
            steps = last[1] - first[1]
            runs[sink].append({
                "steps": figures["steps"], "loop_s": figures["loop_s"],
                "finish_s": figures["finish_s"],
                "steps_per_s": figures["steps"] / figures["loop_s"],
                "rss_growth_mb": last[2] - first[2],
                "rss_kb_per_1k_steps": 1024 * (last[2] - first[2]) / steps * 1000,
                "on_disk": lines(tmp / name) / figures["steps"],
            })
            print(f"  {sink} sink: {figures['steps']:,} steps in {figures['loop_s']:.1f} s, "
                  f"RSS {first[2]:.0f} -> {last[2]:.0f} MB, finish() {figures['finish_s']:.2f} s",
                  file=sys.stderr)
    return {sink: {key: statistics.median(run[key] for run in rows) for key in rows[0]}
            for sink, rows in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 kills, 6 s memory runs")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SIGKILL at random times ({STEP_S * 1e6:g} µs steps, window {WINDOW}, a sink "
              "sleeping 1 s per record):", file=sys.stderr)
        killed = kills(Path(tmp), 4 if args.quick else 8, rng)
        print("memory over time (slow sink vs none):", file=sys.stderr)
        mem = memory(Path(tmp), 6.0 if args.quick else 15.0, 1 if args.quick else 2)
    lost = [row["lost_windows"] for row in killed]
    recovered = [row["recovered"] / row["done"] for row in killed]
    slow, none = mem["slow"], mem["none"]
    growth_ratio = (slow["rss_growth_mb"] / none["rss_growth_mb"]
                    if none["rss_growth_mb"] > 0 else None)
    print(f"\nrecovered / done after SIGKILL: min {min(recovered):.5f}, median "
          f"{statistics.median(recovered):.5f} over {len(killed)} kills")
    print(f"lost, in windows of {WINDOW}: max {max(lost):.2f}, median {statistics.median(lost):.2f}"
          f" (promise: <= 1, the open half window and the half being written)")
    print(f"RSS growth with the 1 s sink / with no sink: "
          f"{growth_ratio:.2f}x" if growth_ratio is not None else "RSS did not grow without a sink")
    for name, row in (("no sink", none), ("1 s sink", slow)):
        print(f"  {name}: {row['rss_kb_per_1k_steps']:.1f} kB per 1k steps, finish() "
              f"{row['finish_s']:.2f} s, {row['steps_per_s']:,.0f} steps/s, on disk "
              f"{row['on_disk']:.4f} of the steps")
    speed = slow["steps_per_s"] / none["steps_per_s"]
    print(f"loop speed with the 1 s sink / with no sink: {speed:.3f}")
    from results import write_result

    write_result("writer", quick=args.quick, figures={
        "kills": len(killed), "recovered / done, min": min(recovered),
        "recovered / done, median": statistics.median(recovered),
        "lost windows, max (promise <= 1)": max(lost),
        "lost windows, median": statistics.median(lost),
        "RSS growth, 1 s sink / no sink": growth_ratio, "loop speed, 1 s sink / no sink": speed,
        "finish() s, no sink": none["finish_s"], "finish() s, 1 s sink": slow["finish_s"]})
    if args.json:
        print(json.dumps({"kills": killed, "memory": mem, "rss_growth_ratio": growth_ratio,
                          "speed_ratio": speed}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
