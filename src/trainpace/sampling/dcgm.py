"""DCGM profiling fields, when DCGM's Python bindings import and its host engine answers.

DCGM is what gives Volta–Ampere data-center GPUs real activity counters (Hopper and newer
have NVML GPM, which :mod:`.nvml` reads without DCGM). Its bindings are not on PyPI: they
ship with the ``datacenter-gpu-manager`` OS package (``/usr/share/datacenter-gpu-manager-4/
bindings/python3`` or ``/usr/local/dcgm/bindings/python3``); put that folder on
``PYTHONPATH`` and run ``nv-hostengine``. Profiling fields hold a system-wide lock that
Nsight and CUPTI profilers need too, so they are only watched when GPM is not available.

Fields (DCGM docs, "Profiling Metrics"), as percentages:
``DCGM_FI_PROF_SM_ACTIVE`` (1002, share of time a warp was resident, averaged over SMs),
``SM_OCCUPANCY`` (1003), ``PIPE_TENSOR_ACTIVE`` (1004), ``DRAM_ACTIVE`` (1005, share of
cycles the memory interface was busy; NVIDIA: ~80% is the practical peak).
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainpace.errors import DeviceError

logger = logging.getLogger(__name__)

FIELDS: Mapping[int, str] = {
    1002: "dcgm_sm_active_pct",
    1003: "dcgm_sm_occupancy_pct",
    1004: "dcgm_tensor_active_pct",
    1005: "dcgm_dram_active_pct",
}
BINDINGS_HINT = (
    "add DCGM's bindings folder (/usr/share/datacenter-gpu-manager-4/bindings/python3 or "
    "/usr/local/dcgm/bindings/python3) to PYTHONPATH and start nv-hostengine"
)


def open_reader(gpu_ids: Sequence[int], interval_s: float) -> Any:
    """A connected ``DcgmReader`` watching :data:`FIELDS`; :class:`DeviceError` if none."""
    try:
        module = importlib.import_module("DcgmReader")
    except ImportError as exc:
        raise DeviceError(f"DCGM's Python bindings do not import; {BINDINGS_HINT}") from exc
    reader = module.DcgmReader(
        fieldIds=list(FIELDS),
        updateFrequency=max(100_000, int(interval_s * 1e6)),  # µs; DCGM's minimum is 100 ms
        gpuIds=list(gpu_ids),
    )
    reader.Init()
    if getattr(reader, "m_dcgmHandle", None) is None:
        raise DeviceError(f"DCGM: cannot connect to nv-hostengine; {BINDINGS_HINT}")
    return reader


def _pct(value: Any) -> float | None:
    """A DCGM ratio (0..1) as a percentage; blank sentinels and junk are None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.5:
        return None
    return 100.0 * number


class Dcgm:
    """Reads the profiling fields of some GPUs (DCGM ids are NVML indices)."""

    def __init__(self, gpu_ids: Sequence[int], *, interval_s: float = 0.1,
                 reader: Any = None) -> None:
        self.gpu_ids = list(gpu_ids)
        self._reader = reader if reader is not None else open_reader(self.gpu_ids, interval_s)
        self._failed = False

    def read(self) -> dict[int, dict[str, float | None]]:
        """``{gpu: {FIELDS value: pct or None}}``; empty if DCGM failed this time."""
        try:
            values = self._reader.GetLatestGpuValuesAsFieldIdDict()
        except Exception as exc:  # noqa: BLE001 - a DCGM fault must not stop sampling
            if not self._failed:
                self._failed = True
                logger.info("trainpace: DCGM reading failed (%s: %s); its fields are null",
                            type(exc).__name__, exc)
            return {}
        out: dict[int, dict[str, float | None]] = {}
        for gpu in self.gpu_ids:
            fields = values.get(gpu) or {}
            out[gpu] = {key: _pct(fields.get(field_id)) for field_id, key in FIELDS.items()}
        return out

    def close(self) -> None:
        """Disconnect from the host engine (best effort)."""
        try:
            self._reader.Shutdown()
        except Exception:  # disconnecting is best effort
            logger.debug("trainpace: DCGM shutdown failed", exc_info=True)
