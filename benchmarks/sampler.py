"""CPU cost of the background sampler (target: under 1% of one core at 10 Hz).

The main thread sleeps while the sampler thread of a ``DeviceVitals`` reads the host (and
the GPU) at the asked rate; the process's CPU time over the wall time is the sampler's cost
(an idle baseline of the same length is subtracted). ``--workers N`` starts N sleeping child
processes, as DataLoader workers would be, since the host reading follows them.
``--fake-gpu`` adds NVML readings through the fake library (the Python side of the real
binding; a real driver's own cost is only seen with ``--device cuda`` on a GPU machine).

    python benchmarks/sampler.py             # 10 s at 10 Hz, host only
    python benchmarks/sampler.py --quick     # 3 s
    python benchmarks/sampler.py --workers 4 --fake-gpu
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def cpu_share_pct(seconds: float) -> tuple[float, float]:
    """(CPU % of one core used by this process, wall seconds) over ``seconds`` of sleep."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    deadline = wall0 + seconds
    while (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.5))
    wall = time.perf_counter() - wall0
    return 100.0 * (time.process_time() - cpu0) / wall, wall


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

    from trainpace.vitals import DeviceVitals

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
        vitals = DeviceVitals(device=device, interval_s=1.0 / args.hz, t0=time.perf_counter(),
                              nvml=nvml, dcgm=False, count_flops=False)
        started = time.process_time()
        vitals.start()  # opening the sources is a one-time cost, reported apart
        start_ms = 1000 * (time.process_time() - started)
        with_sampler, wall = cpu_share_pct(seconds)
        vitals.stop()
        sampler = vitals._sampler
        rows = vitals.drain_rows()
    finally:
        for child in children:
            child.kill()
            child.wait()
    cost = max(with_sampler - baseline, 0.0)
    result = {
        "hz": args.hz,
        "seconds": round(wall, 2),
        "readings": sampler.readings,
        "rows": len(rows),
        "reading_ms": round(1000 * sampler.busy_s / max(sampler.readings, 1), 3),
        "reading_cpu_ms": round(1000 * sampler.busy_cpu_s / max(sampler.readings, 1), 3),
        "workers": args.workers,
        "gpu": "fake" if args.fake_gpu else ("real" if device == "cuda" else None),
        "start_cpu_ms": round(start_ms, 1),
        "baseline_cpu_pct": round(baseline, 3),
        "with_sampler_cpu_pct": round(with_sampler, 3),
        "sampler_cpu_pct_of_one_core": round(cost, 3),
        "target_pct": 1.0,
        "ok": cost < 1.0,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
