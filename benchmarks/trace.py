"""Trace analysis speed and memory: trainpace vs Holistic Trace Analysis 0.5 vs a bare parse.

Each measurement runs in a fresh child process, which reports the wall time of the work
(imports excluded), its peak resident memory (``VmHWM``; processes it starts, ``ru_maxrss``)
and its resident memory right after the imports; "above base" is the difference, the memory the
analysis itself needed. The three contenders:

- ``floor``: read the file, gunzip it, ``orjson.loads`` it (nothing can analyze faster);
- ``trainpace``: ``trainpace.trace.analyze_traces`` (every analysis of ``trainpace analyze``);
- ``hta``: ``TraceAnalysis(trace_dir=...)`` then the temporal breakdown, the comm/compute
  overlap, the idle-time breakdown of every rank and the kernel breakdown.

HTA runs from its own virtual environment (default ``.venv-hta`` at the repository root;
``--setup-hta`` creates it: CPU torch first, then holistictraceanalysis==0.5.0 and pandas<3).

    python benchmarks/trace.py            # the traces in tests/data/traces + a 3x ResNet trace
    python benchmarks/trace.py --quick    # the real traces only, one repeat
    python benchmarks/trace.py --json out.json my_trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
def _status_kb(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
paths = json.loads(sys.argv[1])
{imports}
base = _status_kb("VmRSS")
t0 = time.perf_counter()
{work}
seconds = time.perf_counter() - t0
peak = max(_status_kb("VmHWM"), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print("@@" + json.dumps({{"s": seconds, "peak_kb": peak, "base_kb": base, "check": check}}))
"""

FLOOR = {
    "imports": "import gzip, orjson",
    "work": """
check = []
for p in paths:
    raw = open(p, "rb").read()
    if raw[:2] == b"\\x1f\\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    check.append(len(doc["traceEvents"] if isinstance(doc, dict) else doc))
    del raw, doc
""",
}

TRAINPACE = {
    "imports": "from trainpace.trace import analyze_traces",
    "work": """
analysis = analyze_traces(paths, workers=None if len(paths) > 1 else 1)
check = [r.idle_us for r in analysis.ranks]
""",
}

HTA = {
    "imports": """
import logging, os, tempfile, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
folder = tempfile.mkdtemp()
for i, p in enumerate(paths):
    os.symlink(os.path.abspath(p), os.path.join(folder, f"rank{i}_" + os.path.basename(p)))
""",
    "work": """
ta = TraceAnalysis(trace_dir=folder)
tb = ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
for r in ta.t.get_ranks():
    ta.get_idle_time_breakdown(ranks=[r], visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
check = [float(x) for x in tb.sort_values("rank")["idle_time(us)"]]
""",
}


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


def interleaved(repeats: int, contenders: dict[str, tuple[str, dict[str, str]]],
                paths: list[str], env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each contender (name: its python and spec) measured ``repeats`` times, taking turns, so
    that a slow spell of a shared machine falls on all of them alike."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (python, spec) in contenders.items():
            runs[name].append(measure(python, spec, paths, env))
    return {name: summarize(r) for name, r in runs.items()}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median time and the largest memory over the runs."""
    return {
        "s": statistics.median(r["s"] for r in runs),
        "peak_mb": max(r["peak_kb"] for r in runs) / 1024,
        "above_base_mb": max(r["peak_kb"] - r["base_kb"] for r in runs) / 1024,
        "check": runs[0]["check"],
    }


def json_mb(path: str) -> float:
    raw = Path(path).read_bytes()
    return len(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw) / 1e6


def scaled_trace(source: Path, copies: int, out: Path) -> Path:
    """A bigger trace: ``copies`` back-to-back copies of a real one (steps renumbered, ids and
    correlations offset), written as gzip."""
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
    out.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=3))
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
              "only the floor and trainpace are measured", file=sys.stderr)

    sets: list[tuple[str, list[str]]]
    with tempfile.TemporaryDirectory() as tmp:
        if args.traces:
            sets = [(Path(t).name, [t]) for t in args.traces]
        else:
            sets = [(p.name, [str(p)]) for p in sorted(DATA.glob("*.gz"))]
            sets.append(("sampled ranks 0+1 (parallel)",
                         [str(DATA / "sampled_rank-0.json.gz"), str(DATA / "sampled_rank-1.json.gz")]))
            if not args.quick and args.scale > 1:
                big = scaled_trace(DATA / "resnet50_num_workers_0.pt.trace.json.gz", args.scale,
                                   Path(tmp) / f"resnet50_x{args.scale}.json.gz")
                sets.append((big.name, [str(big)]))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        rows = []
        for label, paths in sets:
            row: dict[str, Any] = {"trace": label, "json_mb": sum(json_mb(p) for p in paths)}
            contenders = {"floor": (sys.executable, FLOOR), "trainpace": (sys.executable, TRAINPACE)}
            if hta_python:
                contenders["hta"] = (hta_python, HTA)
            row.update(interleaved(repeats, contenders, paths, env))
            if hta_python:
                row["agree"] = row["hta"]["check"] == row["trainpace"]["check"]
            rows.append(row)
            _print_row(row)
    _print_summary(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _print_row(row: dict[str, Any]) -> None:
    f, t, h = row["floor"], row["trainpace"], row.get("hta")
    line = (f"{row['trace']:<44} {row['json_mb']:7.1f} MB JSON | floor {f['s']:6.2f} s "
            f"{f['above_base_mb']:6.0f} MB | trainpace {t['s']:6.2f} s {t['above_base_mb']:6.0f} MB "
            f"(peak {t['peak_mb']:4.0f})")
    if h:
        line += (f" | HTA {h['s']:6.2f} s {h['above_base_mb']:6.0f} MB (peak {h['peak_mb']:4.0f})"
                 f" | {h['s'] / t['s']:5.1f}x faster, {t['above_base_mb'] / h['above_base_mb']:.2f}"
                 f" of HTA's memory, idle figures {'agree' if row['agree'] else 'DIFFER'}")
    line += f" | {t['s'] / f['s']:.2f}x the bare parse"
    print(line, flush=True)


def _print_summary(rows: list[dict[str, Any]]) -> None:
    with_hta = [r for r in rows if "hta" in r]
    print("\ntargets: >= 10x faster than HTA, <= 1/5 of its memory, <= 2x the bare parse")
    if with_hta:
        speed = [r["hta"]["s"] / r["trainpace"]["s"] for r in with_hta]
        memory = [r["trainpace"]["above_base_mb"] / r["hta"]["above_base_mb"] for r in with_hta]
        total = [r["trainpace"]["peak_mb"] / r["hta"]["peak_mb"] for r in with_hta]
        print(f"speed vs HTA: {min(speed):.1f}x to {max(speed):.1f}x; memory above the imports: "
              f"{min(memory):.2f} to {max(memory):.2f} of HTA's; whole process peak: "
              f"{min(total):.2f} to {max(total):.2f} of HTA's")
    floor = [r["trainpace"]["s"] / r["floor"]["s"] for r in rows]
    print(f"vs the bare orjson parse: {min(floor):.2f}x to {max(floor):.2f}x its time")


if __name__ == "__main__":
    sys.exit(main())
