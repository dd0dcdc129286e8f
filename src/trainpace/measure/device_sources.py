"""Where the device vitals come from: the host, NVML, DCGM and RAPL, opened and read together.

:class:`DeviceSources` opens each source on its own (the caller contains and names each
failure), names the device, and turns one reading of every open source into a sampler
:data:`~trainpace.sampling.sampler.Reading`: the ``system.jsonl`` row and the flat numbers the
sampler aggregates over time. On a CPU run the device's utilization is the training process's
CPU use (without DataLoader workers) against the threads torch uses, capped at 100%.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import torch

from trainpace.sampling.host import HOST_KEYS, JOB_KEY, HostSource
from trainpace.sampling.nvml import READING_KEYS, THROTTLE_NAMES, GpuInfo, Nvml, target_for
from trainpace.sampling.rapl import RaplReader
from trainpace.sampling.sampler import Reading
from trainpace.units import number_or_none

logger = logging.getLogger(__name__)

# Sampled bandwidth sources, best first (series name, summary source name).
BANDWIDTH_SOURCES: tuple[tuple[str, str], ...] = (
    ("gpu.dram_bw_util_pct", "nvml_gpm_dram_bw_util"),
    ("gpu.dcgm_dram_active_pct", "dcgm_dram_active"),
    ("gpu.memory_busy_pct", "nvml_memory_busy"),
)
_ROW_BANDWIDTH = tuple(key.removeprefix("gpu.") for key, _ in BANDWIDTH_SOURCES)
_GPU_NUMBERS = tuple(k for k in READING_KEYS if k not in ("throttle_reasons", "throttled"))
_DCGM_KEYS = ("dcgm_sm_active_pct", "dcgm_sm_occupancy_pct", "dcgm_tensor_active_pct",
              "dcgm_dram_active_pct")

Fault = Callable[[str, BaseException], None]


class DeviceSources:
    """The open sources of one metered device and how to read them.

    ``nvml``, ``dcgm``, ``host``: as :class:`~trainpace.measure.vitals.DeviceVitals` takes them
    (a fake module or reader for tests, None for the default, False for none). ``fault`` is
    told of a source that fails while reading; the others are read all the same.
    """

    def __init__(self, device: torch.device, *, clock: Callable[[], float], nvml: Any,
                 dcgm: Any, host: Any, fault: Fault) -> None:
        self.device = device
        self._clock = clock
        self._nvml_arg, self._dcgm_arg, self._host_arg = nvml, dcgm, host
        self._fault = fault
        self.nvml: Nvml | None = None
        self.gpu: GpuInfo | None = None
        self.dcgm: Any = None
        self.host: Any = None
        self.rapl: RaplReader | None = None
        self.name: str | None = None
        self.threads = torch.get_num_threads()

    # -- opening (each raises on its own; the caller contains it) -------------------------

    def open_host(self) -> None:
        if self._host_arg is False:
            return
        self.host = self._host_arg if self._host_arg is not None else HostSource()
        if self.device.type == "cpu" and self._host_arg is None:
            # the CPU packages' energy counters, where the kernel lets us read them
            rapl = RaplReader()
            self.rapl = rapl if rapl.available else None

    def open_nvml(self) -> None:
        if self._nvml_arg is False:
            return
        index: int | None = self.device.index
        uuid = None
        if torch.cuda.is_available():
            index = torch.cuda.current_device() if index is None else index
            with contextlib.suppress(Exception):
                uuid = str(torch.cuda.get_device_properties(index).uuid)
        target = target_for(index, uuid=uuid)
        if target is None:
            raise RuntimeError("the CUDA device is a MIG instance or hidden from NVML")
        nvml = Nvml(self._nvml_arg, clock=self._clock)
        gpus = nvml.open([target])
        self.nvml, self.gpu = nvml, gpus[0]

    def open_dcgm(self, interval_s: float) -> None:
        if self._dcgm_arg is False or self.gpu is None or self.gpu.gpm:
            return
        from trainpace.sampling.dcgm import Dcgm

        if self._dcgm_arg is not None:
            self.dcgm = Dcgm([self.gpu.index], reader=self._dcgm_arg)
            return
        try:
            self.dcgm = Dcgm([self.gpu.index], interval_s=interval_s)
        except Exception as exc:  # noqa: BLE001 - DCGM is optional: its absence is normal
            logger.info("trainpace: no DCGM profiling fields (%s)", exc)

    def resolve_name(self) -> None:
        if self.gpu is not None and self.gpu.name:
            self.name = self.gpu.name
        elif self.device.type == "cuda" and torch.cuda.is_available():
            self.name = torch.cuda.get_device_name(self.device)
        elif self.device.type == "cpu":
            from trainpace.devices.ceilings import cpu_name

            self.name = cpu_name()

    # -- reading (the sampler thread) -----------------------------------------------------

    def read(self) -> Reading:
        """One reading of every open source: (the ``system.jsonl`` row, the flat numbers)."""
        host = self._source("host readings", self.host.read) if self.host else None
        gpus: list[dict[str, Any]] = []
        if self.nvml is not None:
            gpus = self._source("NVML readings", self.nvml.read) or []
        if self.dcgm is not None and gpus:
            fields = self._source("DCGM readings", self.dcgm.read) or {}
            for gpu in gpus:
                gpu.update(fields.get(gpu["index"]) or dict.fromkeys(_DCGM_KEYS))
        flat: dict[str, float | None] = {"sampler.reading": 1.0}
        for key in (*HOST_KEYS, JOB_KEY):  # the job's share: None where this is its only rank
            flat[f"host.{key}"] = number_or_none((host or {}).get(key))
        if self.device.type == "cuda":
            row = self._gpu_row(gpus[0] if gpus else {}, flat)
        else:
            # the CPU is measured through the process; another accelerator (MPS) exposes
            # no utilization: unknown, not the CPU's figures
            main = (host or {}).get("main_cpu_pct") if self.device.type == "cpu" else None
            util = min(100.0, main / self.threads) if main is not None else None
            memory = (host or {}).get("memory_used_pct") if self.device.type == "cpu" else None
            row = {
                "device_util_pct": util,
                "memory_used_pct": memory,
                "temperature_c": None,
                "bandwidth_util_pct": None,
                "bandwidth_source": None,
            }
        for key in ("device_util_pct", "memory_used_pct", "temperature_c"):
            flat[key] = number_or_none(row[key])
        row["host"] = host
        row["gpus"] = gpus
        if self.rapl is not None:
            row["rapl"] = self._source("RAPL readings", self.rapl.read)
        return row, flat

    @staticmethod
    def _gpu_row(gpu: dict[str, Any], flat: dict[str, float | None]) -> dict[str, Any]:
        """The row's headline readings of the metered GPU; its numbers go into ``flat``."""
        bandwidth = next(((k, gpu[k]) for k in _ROW_BANDWIDTH if gpu.get(k) is not None),
                         (None, None))
        for key in (*_GPU_NUMBERS, *_DCGM_KEYS):
            flat[f"gpu.{key}"] = number_or_none(gpu.get(key))
        throttled, reasons = gpu.get("throttled"), gpu.get("throttle_reasons")
        flat["gpu.throttled"] = None if throttled is None else 100.0 * bool(throttled)
        for name in THROTTLE_NAMES:
            flat[f"gpu.throttle.{name}"] = None if reasons is None else 100.0 * (
                name in reasons)
        return {
            "device_util_pct": gpu.get("util_pct"),
            "memory_used_pct": gpu.get("memory_used_pct"),
            "temperature_c": gpu.get("temperature_c"),
            "bandwidth_util_pct": bandwidth[1],
            "bandwidth_source": dict(BANDWIDTH_SOURCES).get(f"gpu.{bandwidth[0]}"),
        }

    def _source(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - one source failing leaves the others
            self._fault(what, exc)
            return None

    def close(self, contained: Callable[[str, Callable[[], object]], None]) -> None:
        """Close DCGM, NVML and the host's open /proc files, each failure given to
        ``contained``."""
        if self.host is not None and self._host_arg is None:  # ours: its /proc files
            contained("closing the host readings", self.host.close)
        if self.dcgm is not None:
            contained("closing DCGM", self.dcgm.close)
            self.dcgm = None
        if self.nvml is not None:
            contained("closing NVML", self.nvml.close)
            self.nvml = None
