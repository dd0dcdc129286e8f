"""CPU cost of the background sampler (target: 0.5% of one core at 10 Hz, issue 9 §5).

The main thread sleeps while the sampler thread of a ``DeviceVitals`` reads the host (and
the GPU) at the asked rate; the process's CPU time over the wall time is the sampler's cost
(an idle baseline of the same length is subtracted). ``--workers N`` starts N sleeping child
processes, as DataLoader workers would be, since the host reading follows them.
``--fake-gpu`` adds NVML readings through the fake library (the Python side of the real
binding; a real driver's own cost is only seen with ``--device cuda`` on a GPU machine).

    python benchmarks/sampler.py             # 10 s at 10 Hz, host only
    python benchmarks/sampler.py --quick     # 3 s
    python benchmarks/sampler.py --workers 4 --fake-gpu

Beside the sampler as it is, the same run measures it the way it read before (host figures
through psutil, each reading added to the aggregate table on its own, the thread waiting in
``Event.wait`` and timing each reading's CPU), so the ratio between the two holds on a loaded
machine where the absolute figures drift. ``cycle_cpu_ms`` is the process's CPU time per
reading while only the sampler runs (its whole cycle, waking up included); ``reading_ms`` the
wall time of a reading.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any


def cpu_share_pct(seconds: float) -> tuple[float, float]:
    """(CPU % of one core used by this process, wall seconds) over ``seconds`` of sleep."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    deadline = wall0 + seconds
    while (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.5))
    wall = time.perf_counter() - wall0
    return 100.0 * (time.process_time() - cpu0) / wall, wall


def old_loop(sampler: Any, stop: threading.Event) -> None:
    """The sampler thread's loop as it was: ``Event.wait``, each reading's CPU timed around it."""
    while not stop.wait(sampler.interval_s):
        started = time.thread_time()
        sampler._take()
        sampler.old_cpu_s = getattr(sampler, "old_cpu_s", 0.0) + time.thread_time() - started


def measure(device: str, nvml: object, hz: float, seconds: float, *,
            legacy: bool) -> dict[str, object]:
    """One sampler's CPU share; ``legacy`` reads as before (psutil, a table row per reading)."""
    from trainpace.measure.vitals import DeviceVitals
    from trainpace.sampling import aggregates as series
    from trainpace.sampling.host import HostSource

    pending = series.PENDING_MAX
    series.PENDING_MAX = 1 if legacy else pending
    try:
        host = HostSource(procfs=False) if legacy else None
        vitals = DeviceVitals(device=device, interval_s=1.0 / hz, t0=time.perf_counter(),
                              nvml=nvml, dcgm=False, count_flops=False, host=host)
        sampler = vitals._sampler
        stop = threading.Event()
        if legacy:
            sampler._wait_and_take = lambda: old_loop(sampler, stop)
        started = time.process_time()
        vitals.start()  # opening the sources is a one-time cost, reported apart
        start_ms = 1000 * (time.process_time() - started)
        with_sampler, wall = cpu_share_pct(seconds)
        stop.set()
        vitals.stop()
        rows = vitals.drain_rows()
    finally:
        series.PENDING_MAX = pending
    return {
        "seconds": round(wall, 2),
        "readings": sampler.readings,
        "rows": len(rows),
        "reading_ms": round(1000 * sampler.busy_s / max(sampler.readings, 1), 3),
        # the process's CPU while only the sampler runs, per reading (its whole cycle)
        "cycle_cpu_ms": round(10 * with_sampler * wall / max(sampler.readings, 1), 3),
        "start_cpu_ms": round(start_ms, 1),
        "with_sampler_cpu_pct": round(with_sampler, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="3 seconds")
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (a real GPU through NVML)")
    parser.add_argument("--fake-gpu", action="store_true",
                        help="meter a fake GPU through the real nvidia-ml-py binding")
    parser.add_argument("--workers", type=int, default=0, help="sleeping child processes")
    args = parser.parse_args(argv)
    seconds = 3.0 if args.quick else args.seconds

    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
                for _ in range(args.workers)]
    try:
        baseline, _ = cpu_share_pct(seconds)
        nvml = None
        device = args.device
        if args.fake_gpu:
            from trainpace.sampling.fake import FakeGpu, fake_pynvml

            nvml = fake_pynvml([FakeGpu(gpm={2: 50.0, 3: 20.0, 5: 30.0, 10: 40.0})]).pynvml
            device = "cuda"
        now = measure(device, nvml, args.hz, seconds, legacy=False)
        before = measure(device, nvml, args.hz, seconds, legacy=True)
    finally:
        for child in children:
            child.kill()
            child.wait()
    cost = max(now["with_sampler_cpu_pct"] - baseline, 0.0)
    cost_before = max(before["with_sampler_cpu_pct"] - baseline, 0.0)
    result = {
        "hz": args.hz,
        "workers": args.workers,
        "gpu": "fake" if args.fake_gpu else ("real" if device == "cuda" else None),
        "baseline_cpu_pct": round(baseline, 3),
        "now": now,
        "as_before": before,
        "sampler_cpu_pct_of_one_core": round(cost, 3),
        "sampler_cpu_pct_as_before": round(cost_before, 3),
        "ratio_before_over_now": round(cost_before / cost, 2) if cost > 0 else None,
        "target_pct": 0.5,
        "ok": cost <= 0.5,
    }
    print(json.dumps(result, indent=2))
    from results import write_result

    write_result("sampler", quick=args.quick, figures={
        k: v for k, v in result.items() if not isinstance(v, dict)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
