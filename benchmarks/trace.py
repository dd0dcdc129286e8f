"""Trace analysis speed and memory: trainpace vs Holistic Trace Analysis 0.5 vs gunzip alone.

Two ways, each measured the same way on both sides:

- the library call: in a fresh child process, the wall time of the work after the imports,
  its peak resident memory (``VmHWM``; processes it starts, ``ru_maxrss``) and its resident
  memory right after the imports ("above base" is the memory the analysis itself needed);
- the whole command: the wall time of a fresh process from its start to its exit, imports
  included (``trainpace analyze --json`` against a script doing HTA's imports and analyses);
  before the traces, what each command costs before any work: the interpreter's start and
  exit, and each side's imports alone.

Each is also measured in CPU time (the process's and its children's, user + system), which a
machine shared with other work distorts far less than wall time. Both sides run from bytecode
(trainpace's sources are compiled first, as pip does on install for HTA's).

The contenders:

- ``gunzip``: read the file and decompress it in blocks, nothing else (no analysis can be faster);
- ``parse``: trainpace's own reading alone: decompress (in its thread) and decode the events
  with its typed decoder, the records then dropped (no columns, no analysis): what any
  analysis built on this decoder costs at least;
- ``trainpace``: ``trainpace.trace.analyze_traces`` (every analysis of ``trainpace analyze``),
  the ranks read one after the other;
- ``trainpace_pool`` (several ranks): the same call given a pool of processes
  (``executor=``), forked, as many as HTA's own pool (the CPUs, at most one per rank);
- ``hta``: HTA asked only for what trainpace is compared on: ``TraceAnalysis(trace_dir=...)``,
  the temporal breakdown and the comm/compute overlap;
- ``hta_all``: HTA asked for all of it: those, the idle-time breakdown of every rank and the
  kernel breakdown.

Each repeat runs every contender once, taking turns, so a slow spell of a shared machine falls on
all of them alike; the figures are medians. HTA runs from its own virtual environment (default
``.venv-hta`` at the repository root; ``--setup-hta`` creates it: CPU torch first, then
holistictraceanalysis==0.5.0 and pandas<3).

    python benchmarks/trace.py            # the traces in tests/data/traces + a 3x ResNet trace
    python benchmarks/trace.py --quick    # the real traces only, one repeat
    python benchmarks/trace.py --json out.json my_trace.json.gz
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "traces"
DEFAULT_HTA_VENV = ROOT / ".venv-hta"

# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child would report
# the benchmark's own peak. Processes the work starts report through RUSAGE_CHILDREN.
_MEASURE = """
import json, resource, sys, time
def _cpu():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
def _status_kb(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
paths = json.loads(sys.argv[1])
{imports}
base = _status_kb("VmRSS")
t0, c0 = time.perf_counter(), _cpu()
{work}
seconds, cpu = time.perf_counter() - t0, _cpu() - c0
peak = max(_status_kb("VmHWM"), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print("@@" + json.dumps({{"s": seconds, "cpu_s": cpu, "peak_kb": peak, "base_kb": base, "check": check}}))
"""

GUNZIP = {
    "imports": "import zlib",
    "work": """
check = []
for p in paths:
    size = 0
    with open(p, "rb") as fh:
        gz = fh.read(2) == b"\\x1f\\x8b"
        fh.seek(0)
        inflater = zlib.decompressobj(31) if gz else None
        while block := fh.read(1 << 16):
            size += len(inflater.decompress(block)) if inflater else len(block)
    check.append(size)
""",
}

PARSE = {
    "imports": ("from trainpace.trace.memory import CHUNK_BYTES\n"
                "from trainpace.trace.source import Source\n"
                "from trainpace.trace.stream import Stream"),
    "work": """
class Drop:
    events = 0
    def add(self, events):
        self.events += len(events)
    add_records = add
check = []
for p in paths:
    drop = Drop()
    with Source(p) as source:
        Stream(source, p, CHUNK_BYTES, drop).run()
    check.append(drop.events)
""",
}

TRAINPACE = {
    "imports": "from trainpace.trace import analyze_traces",
    "work": """
analysis = analyze_traces(paths)
check = [r.idle_us for r in analysis.ranks]
""",
}
# Several ranks, read in a pool of processes the caller passes, as HTA reads its ranks by
# default: forked, min(CPUs, ranks) of them.
TRAINPACE_POOL = {
    "imports": ("import multiprocessing, os\n"
                "from concurrent.futures import ProcessPoolExecutor\n"
                "from trainpace.trace import analyze_traces"),
    "work": """
with ProcessPoolExecutor(min(os.cpu_count() or 1, len(paths)),
                         mp_context=multiprocessing.get_context("fork")) as pool:
    analysis = analyze_traces(paths, executor=pool)
check = [r.idle_us for r in analysis.ranks]
""",
}

_HTA_IMPORTS = """
import logging, os, tempfile, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
folder = tempfile.mkdtemp()
for i, p in enumerate(paths):
    os.symlink(os.path.abspath(p), os.path.join(folder, f"rank{i}_" + os.path.basename(p)))
"""
_HTA_COMPARED = """
ta = TraceAnalysis(trace_dir=folder)
tb = ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
check = [float(x) for x in tb.sort_values("rank")["idle_time(us)"]]
"""
HTA = {"imports": _HTA_IMPORTS, "work": _HTA_COMPARED}
HTA_ALL = {"imports": _HTA_IMPORTS, "work": _HTA_COMPARED + """
for r in ta.t.get_ranks():
    ta.get_idle_time_breakdown(ranks=[r], visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
"""}

# The whole command, as a user runs it: a fresh interpreter, its imports, the work, its exit.
# The console script's own entry point (pyproject's [project.scripts]), without the launcher
# pip writes around it (which only imports re and sys first).
TRAINPACE_COMMAND = ("import sys; sys.argv[1:1] = ['analyze', '--json']; "
                     "from trainpace.cli import entry; entry()")
# The same command held to one process: what its pool of processes (several ranks) saves.
TRAINPACE_COMMAND_ONE = ("import sys; sys.argv[1:1] = ['analyze', '--json', '--workers', '1']; "
                         "from trainpace.cli import entry; entry()")
HTA_COMMAND = "import json, sys\npaths = sys.argv[1:]\n" + _HTA_IMPORTS + _HTA_COMPARED
# What each command costs before any work: the interpreter's start and exit, then each side's
# imports alone (trainpace: what `analyze --json` loads; HTA: its script's imports).
BARE_COMMAND = "pass"
NUMPY_IMPORT = "import numpy"
TRAINPACE_IMPORTS = ("from trainpace.cli import main, _analyze; "
                     "import trainpace.trace, trainpace.cli._output")
HTA_IMPORTS_COMMAND = "paths = []\n" + _HTA_IMPORTS


def measure(python: str, spec: dict[str, str], paths: list[str],
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh process; its report as a dict."""
    code = _MEASURE.format(imports=spec["imports"], work=spec["work"])
    done = subprocess.run([python, "-c", code, json.dumps(paths)], capture_output=True,
                          text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("@@")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{python} failed on {paths}: " + " | ".join(tail))
    report: dict[str, Any] = json.loads(lines[-1][2:])
    return report


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_s(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """The wall time of a whole command, from its start to its exit, and its CPU time (its
    own and its children's: the benchmark waits for nothing else meanwhile)."""
    c0, t0 = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=env, check=False)
    seconds, cpu = time.perf_counter() - t0, _children_cpu_s() - c0
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: " + " | ".join(done.stderr.splitlines()[-5:]))
    return {"s": seconds, "cpu_s": cpu}


Contender = tuple[str, "dict[str, str] | list[str]"]


def interleaved(repeats: int, contenders: dict[str, Contender], paths: list[str],
                env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each contender (name: its python and a library spec, or a command's arguments before the
    paths) measured ``repeats`` times, taking turns, so that a slow spell of a shared machine
    falls on all of them alike."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (python, spec) in contenders.items():
            if isinstance(spec, dict):
                runs[name].append(measure(python, spec, paths, env))
            else:
                runs[name].append(command_s([python, *spec, *paths], env))
    return {name: summarize(r) for name, r in runs.items()}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median time and the largest memory over the runs."""
    out: dict[str, Any] = {"s": statistics.median(r["s"] for r in runs),
                           "cpu_s": statistics.median(r["cpu_s"] for r in runs)}
    if "peak_kb" in runs[0]:
        out.update(peak_mb=max(r["peak_kb"] for r in runs) / 1024,
                   above_base_mb=max(r["peak_kb"] - r["base_kb"] for r in runs) / 1024,
                   check=runs[0]["check"])
    return out


def json_mb(path: str) -> float:
    raw = Path(path).read_bytes()
    return len(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw) / 1e6


def scaled_trace(source: Path, copies: int) -> bytes:
    """A bigger trace's JSON: ``copies`` back-to-back copies of a real one (steps renumbered,
    ids and correlations offset)."""
    doc = orjson.loads(gzip.decompress(source.read_bytes()))
    events = doc["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(
        e["ts"] for e in events if "ts" in e)
    out_events = []
    for k in range(copies):
        shift, offset = k * (span + 1000), k * 10_000_000
        for e in events:
            if e.get("ph") == "M" and k:
                continue
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] + shift
            if isinstance(e2.get("id"), int):
                e2["id"] += offset
            name = e2.get("name", "")
            if name.startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(name[13:]) + k * 100}"
            args = e2.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ("correlation", "External id", "external id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] += offset
                e2["args"] = args
            out_events.append(e2)
    doc["traceEvents"] = out_events
    return orjson.dumps(doc)


def write_trace(document: bytes, out: Path, rank: int | None = None,
                world_size: int = 1) -> Path:
    """A trace's JSON written as gzip; with a rank, declared first as a profiler of a
    distributed job writes it (``"distributedInfo": {..., "rank": N}``, a space after each
    colon: HTA finds a trace's rank with the regex ``"rank":\\s+(\\d+)``; without one it
    takes every trace for rank 0 and keeps only the last)."""
    if rank is not None:
        info = f'{{"distributedInfo": {{"backend": "nccl", "rank": {rank}, ' \
               f'"world_size": {world_size}}}, '
        document = info.encode() + document[1:]
    out.write_bytes(gzip.compress(document, compresslevel=3))
    return out


def setup_hta(venv: Path) -> None:
    """Create the HTA environment: CPU torch first so HTA does not pull a CUDA build."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "holistictraceanalysis==0.5.0", "pandas<3"], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", help="trace files (default: tests/data/traces)")
    parser.add_argument("--quick", action="store_true", help="real traces only, one repeat")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--scale", type=int, default=3,
                        help="copies of the ResNet trace in the synthesized large trace")
    parser.add_argument("--hta-python", default=str(DEFAULT_HTA_VENV / "bin" / "python"),
                        help="the python of an environment with holistictraceanalysis 0.5")
    parser.add_argument("--setup-hta", action="store_true",
                        help=f"create {DEFAULT_HTA_VENV.name} first (needs PyPI)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    if args.setup_hta:
        setup_hta(DEFAULT_HTA_VENV)
    hta_python = args.hta_python if Path(args.hta_python).exists() else None
    if hta_python is None:
        print(f"HTA not found at {args.hta_python}: run with --setup-hta or --hta-python; "
              "only gunzip and trainpace are measured", file=sys.stderr)

    sets: list[tuple[str, list[str]]]
    with tempfile.TemporaryDirectory() as tmp:
        if args.traces:
            sets = [(Path(t).name, [t]) for t in args.traces]
        else:
            sets = [(p.name, [str(p)]) for p in sorted(DATA.glob("*.gz"))]
            sets.append(("sampled ranks 0+1 (parallel)",
                         [str(DATA / "sampled_rank-0.json.gz"), str(DATA / "sampled_rank-1.json.gz")]))
            if not args.quick and args.scale > 1:
                document = scaled_trace(DATA / "resnet50_num_workers_0.pt.trace.json.gz",
                                        args.scale)
                big = write_trace(document, Path(tmp) / f"resnet50_x{args.scale}.json.gz")
                sets.append((big.name, [str(big)]))
                # four ranks that say so: HTA reads every trace without a declared rank as
                # rank 0 and analyzes only the last of them
                ranks = [str(write_trace(document, Path(tmp) / f"rank{r}_{big.name}", rank=r,
                                         world_size=4)) for r in range(4)]
                sets.append((f"4 ranks of {big.name}", ranks))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        # An installed package is read from bytecode (pip compiles it, as it did HTA's); with
        # PYTHONDONTWRITEBYTECODE set, a source tree would be compiled again by every process.
        compileall.compile_dir(str(ROOT / "src"), quiet=1)
        print(f"machine: {os.cpu_count()} CPUs, load average {_load()} at the start "
              "(a shared machine: the ratios, measured in turns, are what to read)", flush=True)
        floors: dict[str, Contender] = {
            "python": (sys.executable, ["-c", BARE_COMMAND]),
            "trainpace_imports": (sys.executable, ["-c", TRAINPACE_IMPORTS]),
            "numpy_import": (sys.executable, ["-c", NUMPY_IMPORT]),
        }
        if hta_python:
            floors["hta_imports"] = (hta_python, ["-c", HTA_IMPORTS_COMMAND])
        floor = interleaved(repeats, floors, [], env)
        print("before any work: python starts and exits in " + _t(floor["python"])
              + " | trainpace analyze's imports " + _t(floor["trainpace_imports"])
              + " (of which numpy's alone: " + _t(floor["numpy_import"]) + ")"
              + (" | HTA's imports " + _t(floor["hta_imports"]) if hta_python else ""),
              flush=True)
        rows = []
        for label, paths in sets:
            row: dict[str, Any] = {"trace": label, "json_mb": sum(json_mb(p) for p in paths)}
            contenders: dict[str, Contender] = {
                "gunzip": (sys.executable, GUNZIP),
                "parse": (sys.executable, PARSE),
                "trainpace": (sys.executable, TRAINPACE),
                "trainpace_command": (sys.executable, ["-c", TRAINPACE_COMMAND]),
            }
            if len(paths) > 1:
                contenders["trainpace_pool"] = (sys.executable, TRAINPACE_POOL)
                contenders["trainpace_command_one_process"] = (
                    sys.executable, ["-c", TRAINPACE_COMMAND_ONE])
            if hta_python:
                contenders.update(hta=(hta_python, HTA), hta_all=(hta_python, HTA_ALL),
                                  hta_command=(hta_python, ["-c", HTA_COMMAND]))
            row.update(interleaved(repeats, contenders, paths, env))
            if hta_python:
                row["agree"] = row["hta"]["check"] == row["trainpace"]["check"] == \
                    row.get("trainpace_pool", row["trainpace"])["check"]
            rows.append(row)
            _print_row(row)
    print(f"load average at the end: {_load()}")
    _print_summary(rows, floor)
    from results import write_result

    write_result("trace", quick=args.quick, rows=[
        {"trace": r["trace"], "JSON MB": r["json_mb"],
         **{f"{k} s (wall / CPU)": [v["s"], v["cpu_s"]] for k, v in r.items()
            if isinstance(v, dict) and "s" in v},
         "library call vs HTA": r["hta"]["s"] / r["trainpace"]["s"] if "hta" in r else None,
         "library call with a pool vs HTA": r["hta"]["s"] / r["trainpace_pool"]["s"]
         if "hta" in r and "trainpace_pool" in r else None,
         "vs gunzip": r["trainpace"]["s"] / r["gunzip"]["s"]} for r in rows],
        figures={f"before any work: {k} s": v["s"] for k, v in floor.items()
                 if isinstance(v, dict) and "s" in v})
    if args.json:
        Path(args.json).write_text(json.dumps({"before_work": floor, "traces": rows}, indent=2))
    return 0


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _t(m: dict[str, Any]) -> str:
    """A time as 'wall s (cpu s CPU)'."""
    return f"{m['s']:5.2f} s ({m['cpu_s']:.2f} CPU)"


def _x(slow: dict[str, Any], fast: dict[str, Any]) -> str:
    """How many times faster, in wall time and in CPU time."""
    return f"{slow['s'] / fast['s']:4.1f}x, {slow['cpu_s'] / fast['cpu_s']:4.1f}x CPU"


def _print_row(row: dict[str, Any]) -> None:
    g, t, c, r = row["gunzip"], row["trainpace"], row["trainpace_command"], row["parse"]
    line = (f"{row['trace']}: {row['json_mb']:.1f} MB JSON\n  gunzip {_t(g)} | parse alone "
            f"{_t(r)} = {r['s'] / g['s']:.2f}x gunzip ({r['cpu_s'] / g['cpu_s']:.2f}x CPU)"
            f"\n  trainpace {_t(t)}"
            f" = {t['s'] / g['s']:.2f}x gunzip ({t['cpu_s'] / g['cpu_s']:.2f}x CPU), "
            f"{t['above_base_mb']:.0f} MB above imports | command {_t(c)}")
    if "trainpace_pool" in row:
        pool = row["trainpace_pool"]
        line += (f"\n  trainpace with a pool of processes (executor=) {_t(pool)}"
                 + (f" = {_x(row['hta'], pool)} HTA's time" if "hta" in row else ""))
    if "trainpace_command_one_process" in row:  # a speed trick stays if it saves a fifth
        one = row["trainpace_command_one_process"]
        line += (f"\n  command in one process {_t(one)}: its pool saves "
                 f"{1 - c['s'] / one['s']:.0%} of the command's time (kept if >= 20%)")
    if "hta" in row:
        h, a, hc = row["hta"], row["hta_all"], row["hta_command"]
        line += (f"\n  HTA {_t(h)} = {_x(h, t)} | all {_t(a)} = {_x(a, t)} | command {_t(hc)}"
                 f" = {_x(hc, c)} | memory {t['above_base_mb'] / max(h['above_base_mb'], 1e-9):.2f}"
                 f" of HTA's | idle figures {'agree' if row['agree'] else 'DIFFER'}")
    print(line, flush=True)


def _span(values: list[float]) -> str:
    return f"{min(values):.1f}x to {max(values):.1f}x"


def _ratios(rows: list[dict[str, Any]], slow: str, fast: str) -> str:
    wall = [r[slow]["s"] / r[fast]["s"] for r in rows]
    cpu = [r[slow]["cpu_s"] / r[fast]["cpu_s"] for r in rows]
    return f"{_span(wall)} (CPU time: {_span(cpu)})"


def _print_summary(rows: list[dict[str, Any]], before_work: dict[str, Any]) -> None:
    with_hta = [r for r in rows if "hta" in r]
    print("\ntargets: the library call >= 10x faster than HTA on every trace, in <= 1/5 of its "
          "memory (issue 22; the whole command and gunzip are context)")
    if with_hta:
        memory = [r["trainpace"]["above_base_mb"] / max(r["hta"]["above_base_mb"], 1e-9)
                  for r in with_hta]
        print("library call vs HTA (temporal breakdown + overlap): "
              + _ratios(with_hta, "hta", "trainpace"))
        pooled = [r for r in with_hta if "trainpace_pool" in r]
        if pooled:
            print("library call with a pool of processes vs HTA (its pool), several ranks: "
                  + _ratios(pooled, "hta", "trainpace_pool"))
        print("library call vs HTA asked for all: " + _ratios(with_hta, "hta_all", "trainpace"))
        print("whole command vs HTA's (temporal breakdown + overlap): "
              + _ratios(with_hta, "hta_command", "trainpace_command"))
        print(f"memory above the imports: {min(memory):.2f} to {max(memory):.2f} of HTA's")
        # a tenth of HTA's command is the budget of ours: what the interpreter and numpy's
        # import alone take of it says whether any analysis on numpy can meet it
        start_and_numpy = before_work["python"]["s"] + before_work["numpy_import"]["s"]
        shares = [start_and_numpy / (r["hta_command"]["s"] / 10) for r in with_hta]
        print("whole command's budget (a tenth of HTA's): the interpreter's start and numpy's "
              f"import alone take {min(shares):.0%} to {max(shares):.0%} of it")
    floor = [r["trainpace"]["s"] / r["gunzip"]["s"] for r in rows]
    floor_cpu = [r["trainpace"]["cpu_s"] / r["gunzip"]["cpu_s"] for r in rows]
    print(f"analysis vs gunzip alone: {min(floor):.2f}x to {max(floor):.2f}x its time "
          f"(CPU time: {min(floor_cpu):.2f}x to {max(floor_cpu):.2f}x)")
    parse = [r["parse"]["s"] / r["gunzip"]["s"] for r in rows]
    parse_cpu = [r["parse"]["cpu_s"] / r["gunzip"]["cpu_s"] for r in rows]
    print(f"parse alone (decompress + decode, no analysis) vs gunzip alone: {min(parse):.2f}x "
          f"to {max(parse):.2f}x its time (CPU time: {min(parse_cpu):.2f}x to "
          f"{max(parse_cpu):.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
