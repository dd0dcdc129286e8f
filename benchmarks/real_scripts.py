"""What watching costs real training scripts: bare, under ``trainpace run``, with the Meter.

Three scripts in ``benchmarks/real_scripts/``, written after the published PyTorch examples'
architectures, on synthetic tensors (no downloads), sized for CPU steps of 10 to 30
milliseconds:

- ``mnist``: two convolutions and two linear layers, Adadelta, a DataLoader in the process;
- ``dcgan``: a generator and a discriminator, two Adam optimizers, a DataLoader with one
  worker process (restarted every epoch, as the example's are);
- ``word_lm``: a two-layer LSTM language model, its weights updated by hand (no optimizer:
  no step boundary for ``trainpace run`` to hook), no DataLoader.

Each is run as its own process, three ways: ``bare`` (``python SCRIPT``), ``run``
(``trainpace run --quiet -- SCRIPT``) and ``meter`` (``python SCRIPT --meter DIR``: the loop
written for the Meter). A round runs the three of a script back to back, in an order that
goes through all six permutations over the rounds, so a change of the machine's load falls
on every variant alike; each figure of a variant is a ratio to the bare run of its round, and
the table gives the median over rounds with the lowest and highest ratio (the spread).

Figures per run:

- ``wall``: the process from its start to its exit (``perf_counter`` around it);
- ``cpu``: its CPU time and its children's (DataLoader workers), from ``getrusage``;
- ``steps``: the steps after the first, as the script's own timer saw them (the time from
  the end of its first step to the end of its last): what watching costs each step;
- ``first step``: the first step, which pays trainpace's FLOP count (once per run);
- ``start``: the wall time from the process's start to its training loop's (imports,
  building the model and the data; trainpace's imports and its Meter), less the bare run's;
- ``end``: from the loop's end to the process's exit (trainpace's ``finish()``: summary,
  diagnosis, run folder, report; the interpreter's exit), less the bare run's;
- ``fixed``: what the run pays once whatever its length, the wall beyond the bare run's less
  what its steps after the first took beyond the bare ones (start, first step, end); and the
  length of a run of which that is 1% (``1% of runs from``): wall = fixed + steps, so a run
  that long or longer is watched for at most 1% of its wall when its steps cost nothing;
- ``threads`` (a figure under the table): the CPU of trainpace's threads (sampler, writer)
  as a share of one core, over the process's wall time.

Whole processes on a shared machine differ by several percent from one another, and so do
blocks of a second inside one process (its CPU time as much as its wall time: the machine's
speed changes, not only its share), so the figures above cannot resolve a cost of 1%. The
steady cost is measured apart (``--alternate``): the script runs ``ALTERNATE_STEPS`` steps,
shared among ``STEADY_PROCESSES`` processes (``--processes N``), with the Meter around the
second and third of every four (their
batches through its loader, their steps in its step) and the others bare (ABBA, so that a
drift within the four falls on both alike); after the first tenth, each group of four gives
the metered pair's mean step less the bare pair's, in wall and in process CPU time, and the
figure is their mean with twice its standard error. A group that holds an epoch's first step
is left out, chosen by its place, before any time is read: that step waits for the loader's
start, the script's own (dcgan's worker process starts again, tens to hundreds of
milliseconds that swamp the fraction of a millisecond measured), whichever kind of step takes
it. So is a group that holds a step over ``DISTURBED`` times the median step, one the machine
held up (a 25 ms step that took 80 ms; a cost of tens of microseconds cannot do that), watched
or bare; the steps so held are counted by kind, and where the watched ones outnumber the bare
ones beyond chance (:func:`more_than_chance`) the verdict cannot be ``met`` (the measures'
statistics are in ``steady_stats.py``). Its window
boundaries and hand-overs fall on metered steps. trainpace's threads
(sampler, writer) run through both kinds of step, so the difference cannot see them; they are
measured in other processes of the script with the Meter on every step (one after each
alternating process, half as many steps: a metered run's windows, twice as frequent as the
alternating run's), which read their CPU
clocks at each step's end: their share of a core, and what they delayed the steps
(:func:`thread_delay`: each step they ran in against its neighbours they did not, less what
such a choice of steps gives by chance). Their CPU share does not bound that delay (a
script's torch threads that keep every core busy wait for each other in each operation, and
work in Python also holds the GIL). Each kind's processes are pooled (:func:`pooled`): the
mean over their groups (or spans), and an interval set by the larger of the processes' own
intervals and the spread between them, since the step's cost differs from one process to the
next by more than one process's interval (each lays out its memory anew, and the hooks run
cold). The cost is the step's plus the threads' delay, its interval the root of the sum of
their squares (two estimates from processes of their own): the target (at most 1% on these
steps of 10 ms or more) is ``met`` when the upper end is at most 1%, ``missed`` when the
lower end is above, else ``not resolved``. ``--controls`` measures the
same way control threads whose cost is known (``CONTROLS``: 5 ms twice a second in Python,
the same in C with the GIL released, and one that only wakes), in processes of their own.
``trainpace run``'s hooks do what the Meter's step does from PyTorch's hooks, a few
microseconds a step more (``benchmarks/run_overhead.py``).

Every script's process, bare or watched, runs with glibc's heap kept between steps
(``KEPT_HEAP_ENV``; ``--default-malloc`` runs without, and writes no result): with glibc's
default trimming, word_lm took about 5,400 page faults a step and its steps swung to 2-5 times
their length in runs of a few steps, wherever the heap's top fell.

Before the rounds each variant of each script runs once untimed, so that every timed run
finds what an installed trainpace has: its bytecode compiled (the child processes may write
``__pycache__``, as ``pip install`` does; ``PYTHONDONTWRITEBYTECODE`` is dropped for them), the
device's ceilings cached, the files in the page cache.

    python benchmarks/real_scripts.py             # 5 rounds (about 5 minutes on a quiet machine)
    python benchmarks/real_scripts.py --quick     # 2 rounds of shorter scripts
    python benchmarks/real_scripts.py --steady-x 5  # the steady measure 5 times as long
    python benchmarks/real_scripts.py --processes 10  # the same steps in ten processes each
    python benchmarks/real_scripts.py --controls    # and the threads' measure checked
    python benchmarks/real_scripts.py --only dcgan --persistent-workers  # trainpace's advice
    python benchmarks/real_scripts.py --only word_lm --default-malloc  # glibc's heap trimmed
    python benchmarks/real_scripts.py --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results import write_result
from steady_stats import (
    DISTURBED,
    more_than_chance,
    poisson_above_chance,
    pooled,
    step_cost,
    thread_delay,
    weighted_mean,
)

SCRIPTS = Path(__file__).resolve().parent / "real_scripts"
VARIANTS = ("bare", "run", "meter")
ORDERS = list(itertools.permutations(VARIANTS))
FIGURES = ("wall_s", "cpu_s", "steps_s", "first_step_s")
# The console script's entry point (pyproject's [project.scripts]) without pip's launcher.
TRAINPACE = "import sys; from trainpace.cli import entry; sys.exit(entry())"


@dataclass(frozen=True)
class Script:
    name: str
    steps: int  # full run; --quick runs half


SCRIPT_SET = (Script("mnist", 60), Script("dcgan", 50), Script("word_lm", 80))
# --alternate: the steps of each script's one process (--quick: a third), about 25 s each
ALTERNATE_STEPS = {"mnist": 1200, "dcgan": 1200, "word_lm": 600}
TARGET_PCT = 1.0
# Passed to every script's process (``--persistent-workers``: as trainpace advises); set once
# by main().
SCRIPT_ARGS: tuple[str, ...] = ()


def command(script: Script, variant: str, steps: int, folder: Path) -> list[str]:
    path = str(SCRIPTS / f"{script.name}.py")
    args = ["--steps", str(steps), "--timing", str(folder / "timing.json"), *SCRIPT_ARGS]
    if variant == "bare":
        return [sys.executable, path, *args]
    if variant == "meter":
        return [sys.executable, path, *args, "--meter", str(folder / "meter")]
    return [sys.executable, "-c", TRAINPACE, "run", "--quiet", "--out", str(folder / "run"),
            "--", path, *args]


def heap_text(env: dict[str, str]) -> str:
    """How the scripts' processes ran glibc's heap: kept (``KEPT_HEAP_ENV``) or its default."""
    kept = {name: env[name] for name in KEPT_HEAP_ENV if name in env}
    if not kept:
        return "glibc's default (its free top trimmed)"
    return "kept between steps (" + ", ".join(f"{k}={v}" for k, v in kept.items()) + ")"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# As installed: bytecode written once and read after (pip compiles it at install).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
# glibc's heap kept between steps, in every script's process alike (bare or watched): by
# default glibc gives the heap's free top back to the system whenever it exceeds a threshold
# that follows the largest block freed, and maps large blocks apart; word_lm then took about
# 5,400 page faults a step, and in runs of a few steps at a time its steps took 2-5 times their
# length (one step in ten of a run took over 1.6 times the median), whether a step was watched
# or not and whether trainpace's threads ran in it or not: which steps that hits depends on
# where the heap's top falls, which any small allocation moves. Fixed thresholds keep what a
# step freed for the next, as the caching allocators of PyTorch's GPUs and the jemalloc or
# tcmalloc that PyTorch's CPU tuning guide suggests do. ``--default-malloc`` runs without.
KEPT_HEAP_ENV = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 30)}
CHILD_ENV.update(KEPT_HEAP_ENV)


def run_child(cmd: list[str], folder: Path) -> dict[str, Any]:
    """Run a script's process in ``folder``, silent, as installed; the timing it wrote."""
    subprocess.run(cmd, check=True, cwd=folder, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHILD_ENV)
    timing: dict[str, Any] = json.loads((folder / "timing.json").read_text())
    return timing


def run_once(script: Script, variant: str, steps: int) -> dict[str, float]:
    """One process of ``script`` as ``variant``: its wall, CPU and step figures."""
    with tempfile.TemporaryDirectory(prefix="trainpace-real-") as tmp:
        folder = Path(tmp)
        cpu_before = children_cpu_s()
        start_epoch_s = time.time()
        start = time.perf_counter()
        timing = run_child(command(script, variant, steps, folder), folder)
        wall_s = time.perf_counter() - start
        exit_epoch_s = time.time()
        cpu_s = children_cpu_s() - cpu_before
    ends = timing["ends_s"]
    return {"wall_s": wall_s, "cpu_s": cpu_s, "steps_s": ends[-1] - ends[0],
            "first_step_s": ends[0], "steps": len(ends) - 1,
            "start_s": timing["loop_start_epoch_s"] - start_epoch_s,
            "end_s": exit_epoch_s - timing["loop_end_epoch_s"],
            "trainpace_threads_cpu_s": trainpace_threads_cpu_s(timing)}


def trainpace_threads_cpu_s(timing: dict[str, Any]) -> float:
    """The CPU seconds of trainpace's threads (sampler, writer) in a script's timing."""
    return sum(cpu_s for name, cpu_s in timing["threads_cpu_s"].items()
               if name.startswith("trainpace"))


def measure(scripts: tuple[Script, ...], rounds: int, quick: bool
            ) -> dict[str, list[dict[str, dict[str, float]]]]:
    """Per script, per round: each variant's figures."""
    out: dict[str, list[dict[str, dict[str, float]]]] = {s.name: [] for s in scripts}
    for script in scripts:  # untimed: bytecode, ceilings and page cache as installed
        for variant in VARIANTS:
            run_once(script, variant, 2)
    for r in range(rounds):
        for i, script in enumerate(scripts):
            steps = script.steps // 2 if quick else script.steps
            one = {}
            for variant in ORDERS[(r + 2 * i) % len(ORDERS)]:
                one[variant] = run_once(script, variant, steps)
            out[script.name].append(one)
            print(f"round {r + 1}/{rounds} {script.name}: " + ", ".join(
                f"{v} {one[v]['wall_s']:.2f} s" for v in VARIANTS), file=sys.stderr)
    return out


def alternate_once(script: Script, steps: int) -> dict[str, Any]:
    """One process of ``script`` with the Meter on steps 1 and 2 of every 4: its timing."""
    with tempfile.TemporaryDirectory(prefix="trainpace-real-") as tmp:
        folder = Path(tmp)
        return run_child([*command(script, "meter", steps, folder), "--alternate"], folder)


def threads_run(script: Script, steps: int, prefix: str = "trainpace",
                burn_ms: float | None = None, burn_in: str = "python") -> dict[str, Any]:
    """One process of ``script`` with the Meter on every step (its threads then do per wall
    second what a metered run makes them do: in the alternating run half the steps are
    metered, and its windows take twice as long), the CPU time of the threads named
    ``prefix``* read at each step's end (``burn_ms``: with the control thread, spinning in
    ``burn_in``): its timing."""
    with tempfile.TemporaryDirectory(prefix="trainpace-real-") as tmp:
        folder = Path(tmp)
        cmd = [*command(script, "meter", steps, folder), "--thread-clocks", prefix]
        if burn_ms is not None:
            cmd += ["--burn-ms", str(burn_ms), "--burn-in", burn_in]
        return run_child(cmd, folder)


def threads_share_pct(timing: dict[str, Any]) -> float:
    """The CPU of trainpace's threads over a run, as a share of one core."""
    return 100 * trainpace_threads_cpu_s(timing) / timing["loop_s"]


# The steady measures run in this many processes each, their steps shared out, an alternating
# process and a fully metered one in turn: the Meter's cost per step differs from one process
# to the next by more than one process's interval (each lays out its memory anew, and the
# hooks run cold), so one process is one draw of it.
STEADY_PROCESSES = 3


def steady(scripts: tuple[Script, ...], quick: bool, scale: int = 1,
           controls: bool = False, processes: int = STEADY_PROCESSES
           ) -> dict[str, dict[str, Any]]:
    """Per script: the Meter's cost per steady step (wall and CPU) from alternating runs of
    ``scale`` times ``ALTERNATE_STEPS`` steps in all, shared among ``processes`` processes
    (``quick``: one, a third as long), its threads' cost from fully metered runs
    half as long (their measured delay of the steps, and their share of a core), each kind
    pooled over its processes (:func:`pooled`), and the verdict against ``TARGET_PCT``;
    ``controls``: the same measure of a control thread's known work (``CONTROLS``) and of
    one that only wakes, each in one process as long as one of the threads' runs."""
    out = {}
    if quick:
        processes = 1
    for script in scripts:
        steps = ALTERNATE_STEPS[script.name] * scale // (3 if quick else processes)
        walls, cpus, delays, metered_runs = [], [], [], []
        for _ in range(processes):  # in turn: a drift of the machine falls on both kinds
            timing = alternate_once(script, steps)
            walls.append(step_cost(timing["ends_s"], timing["epoch_starts"]))
            cpus.append(step_cost(timing["cpu_ends_s"], timing["epoch_starts"]))
            metered = threads_run(script, steps // 2)
            metered_runs.append(metered)
            delays.append(_delay_of(metered))
        groups = [float(w["groups"]) for w in walls]
        wall_pct = [100 * w["cost_s"] / w["bare_s"] for w in walls]
        wall = pooled(wall_pct, [100 * w["interval_s"] / w["bare_s"] for w in walls], groups)
        wall_us = pooled([1e6 * w["cost_s"] for w in walls],
                         [1e6 * w["interval_s"] for w in walls], groups)
        cpu_us = pooled([1e6 * c["cost_s"] for c in cpus],
                        [1e6 * c["interval_s"] for c in cpus], groups)
        bare_s = weighted_mean([w["bare_s"] for w in walls], groups)
        # the CPU cost is over the bare step's CPU time (the torch threads' too), not its wall
        cpu_bare_s = weighted_mean([c["bare_s"] for c in cpus], groups)
        delay = pooled([d["delay_pct"] for d in delays], [d["interval_pct"] for d in delays],
                       [m["loop_s"] for m in metered_runs])
        # two estimates from processes of their own: the sum's interval is the root of the
        # sum of their squares
        total = wall["mean"] + delay["mean"]
        interval = (wall["interval"] ** 2 + delay["interval"] ** 2) ** 0.5
        upper, lower = total + interval, total - interval
        held_metered = sum(w["disturbed_metered"] for w in walls)
        held_bare = sum(w["disturbed_bare"] for w in walls)
        held_by_meter = more_than_chance(held_metered, held_bare)
        held_touched = sum(d["held_touched"] for d in delays)
        held_touched_expected = sum(d["held_touched_expected"] for d in delays)
        held_by_threads = poisson_above_chance(held_touched, held_touched_expected)
        verdict = ("missed" if lower > TARGET_PCT
                   else "met" if upper <= TARGET_PCT and not (held_by_meter or held_by_threads)
                   else "not resolved")
        one = out[script.name] = {
            "steps": steps * processes, "processes": processes,
            "groups": int(sum(groups)),
            "epoch_groups_left_out": sum(w["skipped"] for w in walls),
            "disturbed_groups_left_out": sum(w["disturbed"] for w in walls),
            "disturbed_steps_metered": held_metered, "disturbed_steps_bare": held_bare,
            "disturbed_more_in_metered": held_by_meter,
            "bare_step_ms": 1e3 * bare_s,
            "cost_us": wall_us["mean"], "interval_us": wall_us["interval"],
            "cost_pct": wall["mean"], "interval_pct": wall["interval"],
            "cost_pct_each": wall_pct,
            # which set the interval: the processes' own intervals, or the spread between them
            "interval_within_pct": wall["within"], "interval_between_pct": wall["between"],
            "cpu_cost_us": cpu_us["mean"], "cpu_interval_us": cpu_us["interval"],
            "cpu_cost_pct": 100 * cpu_us["mean"] / 1e6 / cpu_bare_s,
            "threads_pct_of_core": statistics.fmean(map(threads_share_pct, metered_runs)),
            "threads_delay_pct": delay["mean"],
            "threads_delay_interval_pct": delay["interval"],
            "threads_delay_pct_each": [d["delay_pct"] for d in delays],
            "threads_touched_steps": sum(d["touched"] for d in delays),
            "threads_held_steps": sum(d["held"] for d in delays),
            "threads_held_touched": held_touched,
            "threads_held_touched_expected": held_touched_expected,
            "threads_hold_steps_up": held_by_threads,
            "total_pct": total, "total_interval_pct": interval,
            "upper_pct": upper, "verdict": verdict}
        print(f"steady {script.name}: {_steady_text(one)}", file=sys.stderr)
        if controls:
            for burn_in, burn_ms in CONTROLS:
                control = _delay_of(
                    threads_run(script, steps // 2, "control-burn", burn_ms, burn_in))
                one[_control_key(burn_in, burn_ms)] = control
                print(f"control {script.name}: {_control_text(burn_in, burn_ms, control)}",
                      file=sys.stderr)
    return out


# The control threads (--controls): where each spins, and how long twice a second: in
# Python (holding the GIL, as trainpace's threads do), in C (the GIL released: the CPU
# alone), and not at all (it only wakes).
CONTROLS = (("python", 5.0), ("c", 5.0), ("python", 0.0))


def _control_key(burn_in: str, burn_ms: float) -> str:
    return f"control_{burn_in}_{burn_ms:g}ms"


def _delay_of(timing: dict[str, Any]) -> dict[str, float]:
    return thread_delay(timing["ends_s"], timing["threads_cpu_ends_s"],
                        timing["epoch_starts"])


def _control_text(burn_in: str, burn_ms: float, delay: dict[str, float]) -> str:
    work = f"spins {burn_ms:g} ms in {'Python' if burn_in == 'python' else 'C'}" \
        if burn_ms else "wakes"
    return (f"a thread that {work} twice a second: "
            f"delay {delay['delay_pct']:+.2f}% ± {delay['interval_pct']:.2f}% for its "
            f"{delay['cpu_pct']:.2f}% of a core ({delay['touched']} steps touched)")


def _steady_text(one: dict[str, Any]) -> str:
    each = ", ".join(f"{pct:+.2f}%" for pct in one["cost_pct_each"])
    delays = ", ".join(f"{pct:+.2f}%" for pct in one["threads_delay_pct_each"])
    return (f"the Meter's step {one['cost_us']:+.0f} ± {one['interval_us']:.0f} µs "
            f"({one['cost_pct']:+.2f}% ± {one['interval_pct']:.2f}% of a "
            f"{one['bare_step_ms']:.1f} ms step; {one['processes']} processes: {each}, "
            f"within ±{one['interval_within_pct']:.2f}%, "
            f"between ±{one['interval_between_pct']:.2f}%; "
            f"{one['groups']} groups, "
            f"{one['epoch_groups_left_out']} at epoch starts left out, "
            f"{one['disturbed_groups_left_out']} held up (steps over {DISTURBED:g}× the "
            f"median: {one['disturbed_steps_metered']} metered, "
            f"{one['disturbed_steps_bare']} bare"
            f"{', more than chance' if one['disturbed_more_in_metered'] else ''}); "
            f"CPU {one['cpu_cost_us']:+.0f} ± {one['cpu_interval_us']:.0f} µs, "
            f"{one['cpu_cost_pct']:+.2f}%), threads "
            f"{one['threads_pct_of_core']:.2f}% of a core, delaying the steps "
            f"{one['threads_delay_pct']:+.2f}% ± {one['threads_delay_interval_pct']:.2f}% "
            f"(metered runs: {delays}; {one['threads_touched_steps']} steps touched; "
            f"{one['threads_held_steps']} held up, {one['threads_held_touched']} of them "
            f"touched, {one['threads_held_touched_expected']:.1f} expected by their time"
            f"{', more than chance' if one['threads_hold_steps_up'] else ''}): "
            f"{one['total_pct']:+.2f}% ± {one['total_interval_pct']:.2f}%, "
            f"at most {one['upper_pct']:.2f}% "
            f"→ {one['verdict']} (target {TARGET_PCT:g}%)")


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def table(measured: dict[str, list[dict[str, dict[str, float]]]]) -> list[dict[str, Any]]:
    rows = []
    for name, rounds in measured.items():
        # the bare script's mean step after the first (its steps are steps + 1 ends)
        bare_step_s = statistics.median(r["bare"]["steps_s"] / r["bare"]["steps"]
                                        for r in rounds)
        for variant in ("run", "meter"):
            row: dict[str, Any] = {"script": name, "variant": variant}
            for figure in ("wall_s", "cpu_s", "steps_s"):
                ratios = [r[variant][figure] / r["bare"][figure] for r in rounds]
                s = spread(ratios)
                row[figure.removesuffix("_s")] = (
                    f"{s['median']:.3f}× ({s['low']:.3f}–{s['high']:.3f})")
            extra = [r[variant]["first_step_s"] - r["bare"]["first_step_s"] for r in rounds]
            row["first step +ms"] = round(1e3 * statistics.median(extra), 1)
            for part in ("start", "end"):
                extra_s = [r[variant][f"{part}_s"] - r["bare"][f"{part}_s"] for r in rounds]
                row[f"{part} +s"] = round(statistics.median(extra_s), 2)
            # what a run pays once, whatever its length: the wall beyond the bare run's that
            # its steps after the first do not account for (imports, first step, finish)
            fixed_s = statistics.median(
                (r[variant]["wall_s"] - r["bare"]["wall_s"])
                - (r[variant]["steps_s"] - r["bare"]["steps_s"]) for r in rounds)
            row["fixed +s"] = round(fixed_s, 2)
            row["1% of runs from s"] = round(100 * fixed_s) if fixed_s > 0 else 0
            row["bare step ms"] = round(1e3 * bare_step_s, 1)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 rounds of shorter scripts")
    parser.add_argument("--rounds", type=int, help="rounds (default 5, --quick 2)")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    parser.add_argument("--steady-x", type=int, default=1, metavar="K",
                        help="K times the steady measure's steps (its interval about 1/sqrt(K))")
    parser.add_argument("--processes", type=int, default=STEADY_PROCESSES, metavar="N",
                        help=f"the steady measures' processes each, the steps shared among "
                             f"them (default {STEADY_PROCESSES}; more estimate the spread "
                             f"between processes better)")
    parser.add_argument("--controls", action="store_true",
                        help="also measure a control thread's known work and one that only "
                             "wakes, as the threads are measured")
    parser.add_argument("--only", choices=[s.name for s in SCRIPT_SET], action="append",
                        help="run only this script (repeatable); the result is not written")
    parser.add_argument("--persistent-workers", action="store_true",
                        help="dcgan's DataLoader keeps its worker between epochs, as trainpace "
                             "advises; the result is not written")
    parser.add_argument("--default-malloc", action="store_true",
                        help="the scripts run with glibc's default heap trimming (by default "
                             "their heap is kept between steps, see KEPT_HEAP_ENV); the result "
                             "is not written")
    args = parser.parse_args()
    if args.processes < 2:
        parser.error(f"--processes: {args.processes} gives no spread between processes to "
                     f"estimate; use 2 or more (default {STEADY_PROCESSES})")
    global SCRIPT_ARGS
    SCRIPT_ARGS = ("--persistent-workers",) if args.persistent_workers else ()
    if args.default_malloc:
        for name in KEPT_HEAP_ENV:
            CHILD_ENV.pop(name, None)
    rounds = args.rounds or (2 if args.quick else 5)
    load_before = [round(x, 2) for x in os.getloadavg()]
    scripts = tuple(s for s in SCRIPT_SET if not args.only or s.name in args.only)
    measured = measure(scripts, rounds, args.quick)
    rows = table(measured)
    steady_costs = steady(scripts, args.quick, args.steady_x, args.controls, args.processes)
    figures: dict[str, Any] = {"rounds": rounds, "steady_x": args.steady_x,
                               "scripts' heap": heap_text(CHILD_ENV)}
    for name, one in steady_costs.items():
        figures[f"{name}: steady step, {one['steps']} steps ABBA in {one['processes']} "
                f"processes"] = (
            _steady_text(one))
        for burn_in, burn_ms in CONTROLS:
            if _control_key(burn_in, burn_ms) in one:
                figures[f"{name}: control, {one['steps'] // one['processes'] // 2} steps "
                        f"metered, "
                        f"{f'{burn_ms:g} ms in {burn_in}' if burn_ms else 'wakes only'}"] = (
                    _control_text(burn_in, burn_ms, one[_control_key(burn_in, burn_ms)]))
    for name, per_round in measured.items():
        for variant in ("run", "meter"):
            share = [r[variant]["trainpace_threads_cpu_s"] / r[variant]["wall_s"]
                     for r in per_round]
            figures[f"{name} {variant}: trainpace's threads, % of one core"] = round(
                100 * statistics.median(share), 2)
    if not (args.only or args.persistent_workers or args.default_malloc):
        write_result("real_scripts", quick=args.quick, rows=rows, figures=figures,
                     load_before=load_before)
    if args.json:
        print(json.dumps({"rows": rows, "steady": steady_costs, "raw": measured}))
        return
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    for name, one in steady_costs.items():
        print(f"steady {name}: {_steady_text(one)}")


if __name__ == "__main__":
    main()
