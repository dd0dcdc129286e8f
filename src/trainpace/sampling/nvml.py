"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Every NVML call goes through one choke point, :meth:`Nvml._query`, which turns NVML's
failures into values:

- a function this driver or binding lacks (``FunctionNotFound``, a version mismatch) moves
  to the next alternative (e.g. memory info v2, then v1), and when none is left the metric
  is off;
- ``NotSupported`` / ``NoPermission``: that metric is off for that GPU, logged once;
- ``GpuIsLost``: the GPU is marked lost; its readings are None from then on, logged once;
- any other NVML error (a timeout, "unknown"): None this time, logged once per kind;
- anything else (a binding bug): the metric is off, logged once.

Calls hold one lock, which :meth:`Nvml.close` takes too, so NVML is never shut down while
the sampler thread is inside it. What is read (see :data:`READING_KEYS`): kernel-active time
(``utilization.gpu``), memory-busy time (``utilization.memory``), memory used/total, temperature
(and, once, the slowdown threshold), power and the enforced limit, SM clock (and its max),
the clocks-event ("throttle") reasons decoded by name, PCIe byte counters as GB/s and, on
Hopper and newer, GPM metrics: SM utilization, SM occupancy, tensor utilization, DRAM
bandwidth utilization.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainpace.errors import DeviceError, MissingDependencyError

logger = logging.getLogger(__name__)

# (bit, name, counts as throttling). nvml.h, nvmlClocksEventReason*; 0x200 and 0x400 exist
# in nvidia-ml-py only under the older "ThrottleReason" names, hence raw values throughout.
THROTTLE_REASONS: tuple[tuple[int, str, bool], ...] = (
    (0x001, "gpu_idle", False),
    (0x002, "applications_clocks_setting", False),
    (0x004, "sw_power_cap", True),
    (0x008, "hw_slowdown", True),
    (0x010, "sync_boost", True),
    (0x020, "sw_thermal_slowdown", True),
    (0x040, "hw_thermal_slowdown", True),
    (0x080, "hw_power_brake_slowdown", True),
    (0x100, "display_clock_setting", True),
    (0x200, "board_limit", True),
    (0x400, "reliability", True),
)
THROTTLE_NAMES: tuple[str, ...] = tuple(name for _, name, _ in THROTTLE_REASONS)

# GPM metric ids (nvml.h nvmlGpmMetricId_t) -> reading key.
GPM_METRICS: Mapping[int, str] = {
    2: "sm_util_pct",  # NVML_GPM_METRIC_SM_UTIL: share of SMs busy
    3: "sm_occupancy_pct",  # NVML_GPM_METRIC_SM_OCCUPANCY: warps active vs the maximum
    5: "tensor_util_pct",  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    10: "dram_bw_util_pct",  # NVML_GPM_METRIC_DRAM_BW_UTIL: DRAM bandwidth vs its peak
}
GPM_MIN_INTERVAL_S = 0.1  # nvml.h: two GPM samples must be more than 100 ms apart

_PCIE_TX, _PCIE_RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES (counters)

READING_KEYS: tuple[str, ...] = (
    "util_pct", "memory_busy_pct", "memory_used_gb", "memory_total_gb", "memory_used_pct",
    "temperature_c", "power_w", "energy_mj", "power_limit_w", "sm_clock_mhz", "throttle_reasons",
    "throttled", "pcie_tx_gb_s", "pcie_rx_gb_s", *GPM_METRICS.values(),
)

# NVML return codes (nvml.h), stable across versions.
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND = 3, 4, 13
_GPU_IS_LOST, _ARGUMENT_VERSION_MISMATCH = 15, 25
_OFF_CODES = frozenset({_NOT_SUPPORTED, _NO_PERMISSION})
_NEXT_CODES = frozenset({_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH})


def decode_throttle_reasons(mask: int) -> tuple[list[str], bool]:
    """The names of the bits set in a clocks-event mask, and whether any is a slowdown.

    Unknown bits are named ``bit_0x...`` and do not count as throttling.
    """
    names = [name for bit, name, _ in THROTTLE_REASONS if mask & bit]
    throttled = any(mask & bit for bit, _, slows in THROTTLE_REASONS if slows)
    known = 0
    for bit, _, _ in THROTTLE_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names, throttled


def import_pynvml() -> Any:
    """The ``pynvml`` module of nvidia-ml-py, or :class:`MissingDependencyError`."""
    try:
        import pynvml
    except ImportError as exc:
        raise MissingDependencyError("GPU readings through NVML", "nvml") from exc
    return pynvml


def target_for(index: int | None, *, uuid: str | None = None,
               env: Mapping[str, str] | None = None) -> int | str | None:
    """The NVML device (index or UUID) behind CUDA device ``index`` of this process.

    The UUID PyTorch reports is exact; without it, ``CUDA_VISIBLE_DEVICES`` maps the CUDA
    index to an NVML index or UUID. A MIG instance gives None (device metrics do not apply).
    """
    if uuid:
        return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    cuda_index = index or 0
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index >= len(entries):
        return None
    entry = entries[cuda_index]
    if entry.startswith("MIG-"):
        return None
    if entry.startswith("GPU-"):
        return entry
    return int(entry) if entry.isdigit() else None


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """What does not change during a run (read once when NVML opens)."""

    index: int
    uuid: str | None
    name: str | None
    memory_total_gb: float | None
    slowdown_temperature_c: float | None
    sm_clock_max_mhz: float | None
    gpm: bool


class _Gpu:
    """One opened GPU: its handle and the state of its counters."""

    def __init__(self, handle: Any, info: GpuInfo) -> None:
        self.handle = handle
        self.info = info
        self.gpm_samples: list[Any] = []
        self.gpm_previous_t: float | None = None
        self.pcie_previous: tuple[float, float, float] | None = None  # (t_s, tx, rx)


class Nvml:
    """Reads the GPUs this process uses. ``lib`` is a pynvml-like module (default: pynvml)."""

    def __init__(self, lib: Any = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib if lib is not None else import_pynvml()
        self._clock = clock
        self._lock = threading.Lock()
        self._gpus: list[_Gpu] = []
        self._off: set[tuple[int, str]] = set()  # (gpu, metric) answered "not supported"
        self._missing: set[str] = set()  # functions this driver or binding lacks
        self._lost: set[int] = set()
        self._logged: set[tuple[Any, ...]] = set()
        self._open = False

    @property
    def gpus(self) -> list[GpuInfo]:
        """The opened GPUs."""
        return [gpu.info for gpu in self._gpus]

    def open(self, targets: Sequence[int | str]) -> list[GpuInfo]:
        """Initialise NVML and open ``targets`` (NVML indices or UUIDs).

        Raises :class:`DeviceError` when NVML cannot start (no driver) or a target is absent.
        """
        lib = self._lib
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            raise DeviceError(f"NVML cannot start ({exc}); is the NVIDIA driver loaded?") from exc
        self._open = True
        for target in targets:
            try:
                if isinstance(target, str):
                    handle = lib.nvmlDeviceGetHandleByUUID(target)
                else:
                    handle = lib.nvmlDeviceGetHandleByIndex(target)
            except lib.NVMLError as exc:
                self.close()
                raise DeviceError(f"NVML has no GPU {target!r} ({exc})") from exc
            self._gpus.append(self._describe(len(self._gpus), handle, target))
        return self.gpus

    def _describe(self, slot: int, handle: Any, target: int | str) -> _Gpu:
        lib = self._lib
        index = self._query(slot, "index", [("nvmlDeviceGetIndex", (handle,), {})])
        if index is None:
            index = target if isinstance(target, int) else slot
        memory = self._memory(slot, handle)
        slowdown = self._query(slot, "slowdown", [(
            "nvmlDeviceGetTemperatureThreshold",
            (handle, lib.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN), {},
        )])
        max_clock = self._query(slot, "sm_clock_max", [(
            "nvmlDeviceGetMaxClockInfo", (handle, lib.NVML_CLOCK_SM), {},
        )])
        support = self._query(slot, "gpm", [("nvmlGpmQueryDeviceSupport", (handle,), {})])
        gpu = _Gpu(handle, GpuInfo(
            index=int(index),
            uuid=_text(self._query(slot, "uuid", [("nvmlDeviceGetUUID", (handle,), {})])),
            name=_text(self._query(slot, "name", [("nvmlDeviceGetName", (handle,), {})])),
            memory_total_gb=memory.total / 1e9 if memory is not None else None,
            slowdown_temperature_c=float(slowdown) if slowdown else None,
            sm_clock_max_mhz=float(max_clock) if max_clock else None,
            gpm=bool(support is not None and getattr(support, "isSupportedDevice", 0)),
        ))
        if gpu.info.gpm:
            samples = [self._query(slot, "gpm", [("nvmlGpmSampleAlloc", (), {})])
                       for _ in range(2)]
            if all(s is not None for s in samples):
                gpu.gpm_samples = samples
        return gpu

    def _memory(self, slot: int, handle: Any) -> Any:
        lib = self._lib
        version = getattr(lib, "nvmlMemory_v2", None)
        calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        if version is not None:
            calls.append(("nvmlDeviceGetMemoryInfo", (handle,), {"version": version}))
        calls.append(("nvmlDeviceGetMemoryInfo", (handle,), {}))
        return self._query(slot, "memory", calls)

    def read(self) -> list[dict[str, Any]]:
        """One reading per opened GPU: ``{"index", "lost", **READING_KEYS}``, None if unknown."""
        return [self._read(slot, gpu) for slot, gpu in enumerate(self._gpus)]

    def _read(self, slot: int, gpu: _Gpu) -> dict[str, Any]:
        lib, handle = self._lib, gpu.handle
        row: dict[str, Any] = {"index": gpu.info.index, **dict.fromkeys(READING_KEYS)}
        util = self._query(slot, "utilization", [
            ("nvmlDeviceGetUtilizationRates", (handle,), {}),
        ])
        if util is not None:
            row["util_pct"] = float(util.gpu)
            row["memory_busy_pct"] = float(util.memory)
        memory = self._memory(slot, handle)
        if memory is not None and memory.total > 0:
            used = memory.total - memory.free  # driver-reserved memory is not yours to use
            row["memory_used_gb"] = used / 1e9
            row["memory_total_gb"] = memory.total / 1e9
            row["memory_used_pct"] = 100.0 * used / memory.total
        temperature = self._query(slot, "temperature", [
            ("nvmlDeviceGetTemperature", (handle, lib.NVML_TEMPERATURE_GPU), {}),
        ])
        row["temperature_c"] = float(temperature) if temperature is not None else None
        power = self._query(slot, "power", [("nvmlDeviceGetPowerUsage", (handle,), {})])
        row["power_w"] = power / 1000.0 if power is not None else None
        # mJ since the driver loaded (Volta and newer): differenced over the measured steps
        energy = self._query(slot, "energy", [
            ("nvmlDeviceGetTotalEnergyConsumption", (handle,), {}),
        ])
        row["energy_mj"] = int(energy) if energy is not None else None
        limit = self._query(slot, "power_limit", [
            ("nvmlDeviceGetEnforcedPowerLimit", (handle,), {}),
        ])
        row["power_limit_w"] = limit / 1000.0 if limit else None
        clock = self._query(slot, "sm_clock", [
            ("nvmlDeviceGetClockInfo", (handle, lib.NVML_CLOCK_SM), {}),
        ])
        row["sm_clock_mhz"] = float(clock) if clock is not None else None
        mask = self._query(slot, "throttle", [
            ("nvmlDeviceGetCurrentClocksEventReasons", (handle,), {}),
            ("nvmlDeviceGetCurrentClocksThrottleReasons", (handle,), {}),
        ])
        if mask is not None:
            row["throttle_reasons"], row["throttled"] = decode_throttle_reasons(int(mask))
        self._pcie(slot, gpu, row)
        self._gpm(slot, gpu, row)
        row["lost"] = slot in self._lost
        return row

    def _pcie(self, slot: int, gpu: _Gpu, row: dict[str, Any]) -> None:
        values = self._query(slot, "pcie", [
            ("nvmlDeviceGetFieldValues", (gpu.handle, [_PCIE_TX, _PCIE_RX]), {}),
        ])
        if values is None:
            return
        if any(v.nvmlReturn != 0 for v in values):
            self._note(("field", slot), "PCIe byte counters are not supported on GPU %d", slot)
            self._off.add((slot, "pcie"))
            return
        now = self._clock()
        tx, rx = float(values[0].value.ullVal), float(values[1].value.ullVal)
        previous, gpu.pcie_previous = gpu.pcie_previous, (now, tx, rx)
        if previous is None or now <= previous[0]:
            return
        elapsed = now - previous[0]
        if tx >= previous[1]:  # a counter that wrapped gives no rate this time
            row["pcie_tx_gb_s"] = (tx - previous[1]) / elapsed / 1e9
        if rx >= previous[2]:
            row["pcie_rx_gb_s"] = (rx - previous[2]) / elapsed / 1e9

    def _gpm(self, slot: int, gpu: _Gpu, row: dict[str, Any]) -> None:
        if len(gpu.gpm_samples) != 2:
            return
        lib = self._lib
        now = self._clock()
        previous, current = gpu.gpm_samples
        if gpu.gpm_previous_t is not None and now - gpu.gpm_previous_t < GPM_MIN_INTERVAL_S:
            return  # too soon for NVML: keep the previous sample for the next reading
        if self._query(slot, "gpm", [("nvmlGpmSampleGet", (gpu.handle, current), {})]) is None:
            return
        if gpu.gpm_previous_t is not None:
            request = lib.c_nvmlGpmMetricsGet_t()
            request.version = lib.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            request.sample1 = previous
            request.sample2 = current
            for i, metric_id in enumerate(GPM_METRICS):
                request.metrics[i].metricId = metric_id
            result = self._query(slot, "gpm", [("nvmlGpmMetricsGet", (request,), {})])
            if result is not None:
                for i, key in enumerate(GPM_METRICS.values()):
                    metric = result.metrics[i]
                    if metric.nvmlReturn == 0:
                        row[key] = float(metric.value)
        gpu.gpm_samples = [current, previous]
        gpu.gpm_previous_t = now

    def _query(self, slot: int, metric: str,
               calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> Any:
        """THE choke point of every NVML call: the first alternative that answers, or None."""
        if slot in self._lost or (slot, metric) in self._off:
            return None
        lib = self._lib
        for name, args, kwargs in calls:
            key = f"{name}{sorted(kwargs)}"
            if key in self._missing:
                continue
            function = getattr(lib, name, None)
            if function is None:
                self._missing.add(key)
                continue
            try:
                with self._lock:
                    if not self._open:
                        return None
                    return function(*args, **kwargs)
            except lib.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code in _NEXT_CODES:
                    self._missing.add(key)
                    continue
                if code == _GPU_IS_LOST:
                    self._lost.add(slot)
                    logger.warning("trainpace: NVML says GPU %d is lost; its readings stop", slot)
                    return None
                if code in _OFF_CODES:
                    self._off.add((slot, metric))
                    self._note(("off", slot, metric), "NVML %s on GPU %d: %s; reported as null",
                               metric, slot, exc)
                    return None
                self._note(("error", metric, code), "NVML %s failed (%s); null this time",
                           metric, exc)
                return None
            except Exception as exc:  # noqa: BLE001 - a binding fault must not stop sampling
                self._off.add((slot, metric))
                self._note(("fault", metric), "NVML %s failed (%s: %s); reported as null",
                           metric, type(exc).__name__, exc)
                return None
        self._off.add((slot, metric))
        self._note(("absent", metric), "NVML has no %s in this driver or binding (%s); null",
                   metric, ", ".join(name for name, _, _ in calls))
        return None

    def _note(self, key: tuple[Any, ...], message: str, *args: Any) -> None:
        """Log an unavailable metric once (info: it is a fact of the machine, not a fault)."""
        if key not in self._logged:
            self._logged.add(key)
            logger.info("trainpace: " + message, *args)

    def close(self) -> None:
        """Free GPM samples and shut NVML down (waits for a call in flight)."""
        lib = self._lib
        with self._lock:
            if not self._open:
                return
            self._open = False
            for gpu in self._gpus:
                for sample in gpu.gpm_samples:
                    with contextlib.suppress(Exception):  # freeing is best effort
                        lib.nvmlGpmSampleFree(sample)
                gpu.gpm_samples = []
            with contextlib.suppress(Exception):  # shutting down is best effort
                lib.nvmlShutdown()


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
