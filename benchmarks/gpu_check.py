"""What only a real GPU can show: run once on a CUDA machine, read the JSON it prints.

Checks (each PASS/FAIL with its figures):

1. ``uuid_mapping``   — the NVML device opened for ``cuda:0`` is the one PyTorch uses.
2. ``nvml_vs_smi``    — our NVML readings against ``nvidia-smi`` taken at the same moments,
                        under a bf16 matmul load (name, memory used, temperature, power,
                        utilization, SM clock); also NVML memory v1 vs v2 as found.
3. ``event_timing``   — CUDA-event step times (``trainpace.measure.clock``) against a host
                        timer around ``torch.cuda.synchronize()``.
4. ``ceilings``       — ``trainpace ceilings`` on this card against the spec table.
5. ``mfu_bf16``       — ``DeviceVitals`` counting a bf16 matmul step and reporting MFU,
                        against the same MFU computed by hand; sampled activity under a
                        matmul load and under a copy load (GPM on Hopper and newer).
6. ``sampler_cost``   — CPU cost of the 10 Hz sampler reading this GPU through the real
                        driver (``benchmarks/sampler.py --device cuda``; target < 1% of a core).
7. ``pytest_gpu``     — the ``gpu``-marked tests.

    python benchmarks/gpu_check.py [--quick] [--out FILE]

Exit code: 0 all passed, 1 a check failed, 2 no CUDA device here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

SMI_FIELDS = ("name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,"
              "temperature.gpu,power.draw,enforced.power.limit,clocks.sm,clocks.max.sm")


def smi(index: int, fields: str = SMI_FIELDS) -> dict[str, str] | None:
    """One nvidia-smi reading of GPU ``index`` (None if nvidia-smi is absent or fails)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
             "-i", str(index)], capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return dict(zip(fields.split(","), (v.strip() for v in out.split(",")), strict=False))


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


class Load:
    """Keeps the GPU busy from a background thread (its own stream) until stopped."""

    def __init__(self, kind: str, n: int = 8192) -> None:
        self.kind = kind
        self._stop = threading.Event()
        if kind == "matmul":
            self._a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            self._b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        else:  # copy: 1 GiB each way
            self._a = torch.empty(2**28, device="cuda", dtype=torch.float32)
            self._b = torch.empty_like(self._a)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            while not self._stop.is_set():
                for _ in range(20):
                    if self.kind == "matmul":
                        torch.mm(self._a, self._b)
                    else:
                        self._b.copy_(self._a)
                stream.synchronize()

    def __enter__(self) -> Load:
        self._thread.start()
        time.sleep(1.0)  # utilization counters look back up to a second
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        torch.cuda.synchronize()


def check_uuid_mapping() -> dict[str, Any]:
    from trainpace.sampling.nvml import Nvml, target_for

    props = torch.cuda.get_device_properties(0)
    target = target_for(0, uuid=str(props.uuid))
    nvml = Nvml()
    try:
        (info,) = nvml.open([target])
    finally:
        nvml.close()
    reading = smi(info.index, "uuid,name") or {}
    ok = info.name == torch.cuda.get_device_name(0) and (
        not reading or reading.get("uuid") == info.uuid)
    return {"ok": ok, "target": target, "nvml_index": info.index, "nvml_uuid": info.uuid,
            "nvml_name": info.name, "torch_name": torch.cuda.get_device_name(0),
            "smi_uuid": reading.get("uuid")}


def check_nvml_vs_smi(rounds: int) -> dict[str, Any]:
    import pynvml

    from trainpace.sampling.nvml import Nvml, target_for

    nvml = Nvml()
    (info,) = nvml.open([target_for(0, uuid=str(torch.cuda.get_device_properties(0).uuid))])
    pairs = []
    with Load("matmul"):
        for _ in range(rounds):
            ours = nvml.read()[0]
            theirs = smi(info.index)
            pairs.append((ours, theirs))
            time.sleep(0.3)
    handle = pynvml.nvmlDeviceGetHandleByIndex(info.index)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    nvml.close()
    if any(theirs is None for _, theirs in pairs):
        return {"ok": False, "why": "nvidia-smi did not answer"}
    problems = []
    rows = []
    for ours, theirs in pairs:
        missing = [k for k in ("util_pct", "memory_used_gb", "temperature_c", "power_w",
                               "power_limit_w", "sm_clock_mhz") if ours[k] is None]
        if missing:
            problems.append(f"NVML gave no {', '.join(missing)}")
            continue
        total_mib = _float(theirs["memory.total"]) or 1.0
        used_mib = (ours["memory_used_gb"] or 0) * 1e9 / 2**20
        row = {
            "util_pct": (ours["util_pct"], _float(theirs["utilization.gpu"])),
            "memory_used_mib": (round(used_mib), _float(theirs["memory.used"])),
            "temperature_c": (ours["temperature_c"], _float(theirs["temperature.gpu"])),
            "power_w": (ours["power_w"], _float(theirs["power.draw"])),
            "power_limit_w": (ours["power_limit_w"], _float(theirs["enforced.power.limit"])),
            "sm_clock_mhz": (ours["sm_clock_mhz"], _float(theirs["clocks.sm"])),
            "throttle_reasons": ours["throttle_reasons"],
            "gpm": {k: ours[k] for k in ("sm_util_pct", "tensor_util_pct", "dram_bw_util_pct")},
        }
        rows.append(row)
        ours_used, smi_used = row["memory_used_mib"]
        if smi_used is None or abs(ours_used - smi_used) > max(0.02 * total_mib, 600):
            problems.append(f"memory used {ours_used} vs {smi_used} MiB")
        t_ours, t_smi = row["temperature_c"]
        if t_smi is None or abs(t_ours - t_smi) > 3:
            problems.append(f"temperature {t_ours} vs {t_smi}")
        p_ours, p_smi = row["power_w"]
        if p_smi is None or abs(p_ours - p_smi) > 0.2 * max(p_smi, 50):
            problems.append(f"power {p_ours} vs {p_smi}")
        if row["power_limit_w"][1] and abs(row["power_limit_w"][0] - row["power_limit_w"][1]) > 1:
            problems.append(f"power limit {row['power_limit_w']}")
        u_ours, u_smi = row["util_pct"]
        if u_ours < 80 or (u_smi is not None and u_smi < 80):
            problems.append(f"utilization under load {u_ours} vs {u_smi}")
    return {
        "ok": not problems, "problems": problems, "rows": rows, "name": info.name,
        "slowdown_c": info.slowdown_temperature_c, "gpm": info.gpm,
        "memory_v1": {"total": v1.total, "free": v1.free, "used": v1.used},
        "memory_v2": {"total": v2.total, "free": v2.free, "used": v2.used,
                      "reserved": v2.reserved},
    }


def check_event_timing(steps: int) -> dict[str, Any]:
    from trainpace.measure.clock import EventTimer

    timer = EventTimer(torch.device("cuda"))
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ a
    torch.cuda.synchronize()
    ratios = []
    for _ in range(5):
        start = timer.mark()
        host0 = time.perf_counter()
        for _ in range(steps):
            a @ a
        end = timer.mark()
        torch.cuda.synchronize()
        host_s = time.perf_counter() - host0
        device_s = timer.elapsed_s(start, end)
        ratios.append(device_s / host_s)
    median = statistics.median(ratios)
    # events exclude the host's enqueue lead-in and the sync return: a little shorter
    return {"ok": 0.97 <= median <= 1.005, "device_over_host": ratios, "median": median}


def check_ceilings(quick: bool) -> dict[str, Any]:
    from trainpace.devices.ceilings import measure_ceilings
    from trainpace.devices.specs import match_spec

    ceilings = measure_ceilings("cuda", quick=quick)
    spec = match_spec(ceilings.name, memory_gb=torch.cuda.get_device_properties(0).total_memory
                      / 2**30)
    result: dict[str, Any] = {"measured": ceilings.to_dict(),
                              "spec": spec.name if spec else None}
    if spec is None:
        result["ok"] = False
        result["why"] = f"{ceilings.name} is not in the spec table"
        return result
    ratios = {"bandwidth": ceilings.bandwidth_gb_s / spec.bandwidth_gb_s}
    for dtype, tflops in ceilings.matmul_tflops.items():
        if dtype in spec.tflops:
            ratios[dtype] = tflops / spec.tflops[dtype]
    result["measured_over_spec"] = ratios
    # a measured rate above the sheet means the table is wrong (or counts sparsity)
    result["ok"] = all(r <= 1.05 for r in ratios.values()) and ratios["bandwidth"] >= 0.5 and \
        ratios.get("bfloat16", 0) >= 0.4
    return result


def check_mfu(steps: int) -> dict[str, Any]:
    from trainpace.measure.clock import EventTimer
    from trainpace.measure.vitals import DeviceVitals

    n = 8192
    t0 = time.perf_counter()
    vitals = DeviceVitals(device="cuda", interval_s=0.1, t0=t0)
    vitals.start()
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    with vitals.flop_counter(samples=n):
        x @ w
    timer = EventTimer(torch.device("cuda"))
    marks = [timer.mark()]
    matmul_from = time.perf_counter() - t0
    for _ in range(steps):
        x @ w
        marks.append(timer.mark())
    torch.cuda.synchronize()
    step_times = [timer.elapsed_s(a, b) for a, b in itertools.pairwise(marks)]
    step_s = statistics.median(step_times)
    # keep the matmul load for a while so the sampler sees it
    with Load("matmul"):
        time.sleep(2.0)
    matmul_to = time.perf_counter() - t0
    with Load("copy"):
        time.sleep(3.0)
    copy_to = time.perf_counter() - t0
    vitals.stop()
    device, bandwidth, flops, _ = vitals.sections(
        t_start_s=matmul_from, t_end_s=matmul_to, step_s=step_s, samples_per_s=None)
    copy_device, copy_bandwidth, _, _ = vitals.sections(
        t_start_s=matmul_to + 1.0, t_end_s=copy_to, step_s=None, samples_per_s=None)
    by_hand = None
    if flops.peak_tflops:
        by_hand = 100 * 2 * n**3 / step_s / (flops.peak_tflops * 1e12)
    ok = (
        flops.per_step == 2 * n**3 and flops.dtype == "bfloat16" and flops.mfu_pct is not None
        and by_hand is not None and abs(flops.mfu_pct - by_hand) < 0.01 * by_hand
        and 30 <= flops.mfu_pct <= 100 and flops.roofline == "compute_bound"
        and (device.util_pct or 0) > 80
    )
    return {
        "ok": ok, "step_s": step_s, "mfu_pct": flops.mfu_pct, "mfu_by_hand_pct": by_hand,
        "achieved_tflops": flops.achieved_tflops, "peak_tflops": flops.peak_tflops,
        "peak_source": flops.peak_source, "roofline": flops.roofline,
        "intensity": flops.intensity_flop_per_byte, "ridge": flops.ridge_flop_per_byte,
        "matmul_load": {
            "util_pct": device.util_pct, "sm_active_pct": device.sm_active_pct,
            "tensor_active_pct": device.tensor_active_pct, "activity": device.activity_source,
            "bandwidth_util_pct": bandwidth.util_pct, "bandwidth_source": bandwidth.source,
            "memory_busy_pct": bandwidth.memory_busy_pct, "power_w": device.power_w,
            "throttle_pct": device.throttle_pct, "throttle_reasons": device.throttle_reasons,
            "temperature_c": device.temperature_c, "sm_clock_mhz": device.sm_clock_mhz,
        },
        "copy_load": {
            "util_pct": copy_device.util_pct, "sm_active_pct": copy_device.sm_active_pct,
            "tensor_active_pct": copy_device.tensor_active_pct,
            "bandwidth_util_pct": copy_bandwidth.util_pct,
            "bandwidth_source": copy_bandwidth.source,
            "memory_busy_pct": copy_bandwidth.memory_busy_pct,
        },
        "meta": vitals.meta(),
    }


def check_sampler_cost(quick: bool) -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, str(here / "sampler.py"), "--device", "cuda", "--workers", "4",
         "--seconds", "5" if quick else "10"], capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        return {"ok": False, "error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout)
    return {"ok": bool(result["ok"]), **result}


def check_pytest() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/sampling", "tests/measure/test_vitals.py",
         "tests/measure", "tests/devices"], cwd=root, capture_output=True, text=True, timeout=300,
    )
    return {"ok": done.returncode == 0, "tail": done.stdout[-2000:] + done.stderr[-1000:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, quick ceilings")
    parser.add_argument("--out", help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    checks = {
        "uuid_mapping": check_uuid_mapping,
        "nvml_vs_smi": lambda: check_nvml_vs_smi(3 if args.quick else 6),
        "event_timing": lambda: check_event_timing(20 if args.quick else 50),
        "ceilings": lambda: check_ceilings(args.quick),
        "mfu_bf16": lambda: check_mfu(20 if args.quick else 50),
        "sampler_cost": lambda: check_sampler_cost(args.quick),
        "pytest_gpu": check_pytest,
    }
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for name, check in checks.items():
        started = time.perf_counter()
        try:
            result = check()
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.perf_counter() - started, 1)
        report[name] = result
        print(f"gpu_check: {name}: {'PASS' if result['ok'] else 'FAIL'} "
              f"({result['seconds']} s)", file=sys.stderr, flush=True)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0 if all(r["ok"] for k, r in report.items() if isinstance(r, dict) and "ok" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
