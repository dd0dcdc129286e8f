"""Device vitals: the one object the Meter drives for device use, bandwidth and FLOPs.

::

    vitals = DeviceVitals(device=device, t0=t0)      # t0: the meter clock's zero
    vitals.start()                                    # sampler thread (contained failures)
    with vitals.flop_counter(samples=n):              # around ONE step excluded from timing
        ...
    rows = vitals.drain_rows()                        # -> system.jsonl
    device, bandwidth, flops, host = vitals.sections(
        t_start_s=a, t_end_s=b, step_s=median_step_s, samples_per_s=rate)
    vitals.stop()

Sources: NVML for the metered CUDA device (with GPM on Hopper+, DCGM profiling fields when
present and GPM is not), psutil for the host. On a CPU run ``device.util_pct`` is the
training process's CPU use (without DataLoader workers) against the threads torch uses,
capped at 100%. Peaks: user override, else the spec table (by device name and memory), else
the ceilings cached by ``trainpace ceilings``. Nothing here raises into the training loop
after construction; a construction argument that is wrong is a :class:`ConfigError`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import torch

from trainpace.devices.ceilings import load_ceilings
from trainpace.devices.specs import Peaks, override_peaks, table_peaks
from trainpace.errors import ConfigError
from trainpace.measure.flops import StepCount, StepCounter
from trainpace.measure.roofline import step_figures
from trainpace.sampling.host import HOST_KEYS, HostSource
from trainpace.sampling.nvml import READING_KEYS, THROTTLE_NAMES, GpuInfo, Nvml, target_for
from trainpace.sampling.rapl import RaplReader
from trainpace.sampling.sampler import Reading, Sampler, is_positive_number
from trainpace.sampling.series import Aggregate
from trainpace.summary import Bandwidth, Device, Flops, Host

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


class DeviceVitals:
    """Samples the metered device and the host; turns a counted step into FLOP figures.

    Args:
        device: the device the training runs on (``cpu``, ``cuda[:N]``).
        interval_s: sampling period (10 Hz default).
        clock: the meter's clock; ``t0`` is its zero (system rows' ``t_s = clock() - t0``;
            default: now, or what :meth:`start` is given).
        nvml: a pynvml-like module (tests pass :func:`trainpace.sampling.fake.fake_pynvml`),
            None for the installed ``pynvml``, False for no NVML.
        flops_per_step: FLOPs of one step, if known; replaces the counted FLOPs.
        peaks: a :class:`~trainpace.devices.specs.Peaks` or a mapping
            ``{"bandwidth_gb_s": x, "tflops": {"bf16": y}}`` overriding table and ceilings.
        count_flops: count FLOPs and bytes of the step run under :meth:`flop_counter`.
        dtype: the dtype whose peak MFU uses (default: the counted step's dominant one).
        dcgm: None to use DCGM when it is present and GPM is not, False for never, or a
            reader object (tests).
        host: a :class:`~trainpace.sampling.host.HostSource`-like object, None for the
            default, False for none.
    """

    def __init__(
        self,
        *,
        device: str | torch.device,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.perf_counter,
        t0: float | None = None,
        nvml: Any = None,
        flops_per_step: float | None = None,
        peaks: Peaks | Mapping[str, Any] | None = None,
        count_flops: bool = True,
        dtype: str | None = None,
        dcgm: Any = None,
        host: Any = None,
    ) -> None:
        if flops_per_step is not None and not is_positive_number(flops_per_step):
            raise ConfigError("flops_per_step", flops_per_step, "must be a number > 0")
        self.device = torch.device(device)
        self._user_peaks = override_peaks(peaks) if peaks is not None else None
        self._clock = clock
        self._sampler = Sampler(self._read, interval_s=interval_s, clock=clock, t0=t0)
        self._nvml_arg, self._dcgm_arg, self._host_arg = nvml, dcgm, host
        self._flops_per_step = float(flops_per_step) if flops_per_step is not None else None
        self._count_flops = count_flops
        self._dtype = dtype
        self._nvml: Nvml | None = None
        self._gpu: GpuInfo | None = None
        self._dcgm: Any = None
        self._host: Any = None
        self._rapl: RaplReader | None = None
        self._threads = torch.get_num_threads()
        self._name: str | None = None
        self._peaks = self._user_peaks or Peaks()
        self._peaks_note: str | None = None
        self._count: StepCount | None = None
        self._count_error: str | None = None
        self._counted = False
        self._faults: set[str] = set()
        self._started = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, *, t0: float | None = None) -> None:
        """Open the sources, resolve the peaks, start the sampler thread. Never raises.

        ``t0``: the meter clock's zero, when it was not known at construction.
        """
        if self._started:
            return
        self._started = True
        if t0 is not None:
            self._contained("setting t0", lambda: self._sampler.set_t0(t0))
        self._threads = torch.get_num_threads()
        self._contained("opening the host readings", self._open_host)
        if self.device.type == "cuda":
            self._contained("opening NVML", self._open_nvml)
            self._contained("opening DCGM", self._open_dcgm)
        self._contained("naming the device", self._resolve_name)
        self._contained("resolving the peaks", self._resolve_peaks)
        self._contained("starting the sampler", self._sampler.start)

    def stop(self) -> None:
        """Join the sampler (after a last reading) and close NVML/DCGM. Never raises."""
        self._contained("stopping the sampler", self._sampler.stop)
        if self._dcgm is not None:
            self._contained("closing DCGM", self._dcgm.close)
            self._dcgm = None
        if self._nvml is not None:
            self._contained("closing NVML", self._nvml.close)
            self._nvml = None

    def sample_once(self) -> dict[str, Any] | None:
        """Take one reading now, without the thread (tests, a manual clock)."""
        return self._sampler.sample_once()

    def _open_host(self) -> None:
        if self._host_arg is False:
            return
        self._host = self._host_arg if self._host_arg is not None else HostSource()
        if self.device.type == "cpu" and self._host_arg is None:
            # the CPU packages' energy counters, where the kernel lets us read them
            rapl = RaplReader()
            self._rapl = rapl if rapl.available else None

    def _open_nvml(self) -> None:
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
        self._nvml, self._gpu = nvml, gpus[0]

    def _open_dcgm(self) -> None:
        if self._dcgm_arg is False or self._gpu is None or self._gpu.gpm:
            return
        from trainpace.sampling.dcgm import Dcgm

        if self._dcgm_arg is not None:
            self._dcgm = Dcgm([self._gpu.index], reader=self._dcgm_arg)
            return
        try:
            self._dcgm = Dcgm([self._gpu.index], interval_s=self._sampler.interval_s)
        except Exception as exc:  # noqa: BLE001 - DCGM is optional: its absence is normal
            logger.info("trainpace: no DCGM profiling fields (%s)", exc)

    def _resolve_name(self) -> None:
        if self._gpu is not None and self._gpu.name:
            self._name = self._gpu.name
        elif self.device.type == "cuda" and torch.cuda.is_available():
            self._name = torch.cuda.get_device_name(self.device)
        elif self.device.type == "cpu":
            from trainpace.devices.ceilings import cpu_name

            self._name = cpu_name()

    @property
    def threads(self) -> int:
        """The torch threads of the run (the CPU's 100%-per-thread scale, its ceiling's key)."""
        return self._threads

    def refresh_peaks(self) -> None:
        """Read the peaks again (a ceiling was measured after the loop)."""
        self._contained("resolving the peaks", self._resolve_peaks)

    def _resolve_peaks(self) -> None:
        memory_gb = None
        if self._gpu is not None and self._gpu.memory_total_gb:
            memory_gb = self._gpu.memory_total_gb * 1e9 / 2**30  # names print GiB as "GB"
        table = table_peaks(self._name, memory_gb=memory_gb)
        ceilings = load_ceilings(self.device) if self.device.type in ("cpu", "cuda") else None
        measured = ceilings.peaks() if ceilings is not None else Peaks()
        peaks = table.merged_over(measured)
        if self._user_peaks is not None:
            peaks = self._user_peaks.merged_over(peaks)
        self._peaks = peaks
        self._peaks_note = None
        if not peaks.tflops and peaks.bandwidth_gb_s is None:
            self._peaks_note = (
                f"no peaks for {self._name or self.device}: not in the spec table and no "
                "measured ceilings; run `trainpace ceilings` once on this machine, or pass peaks"
            )
            logger.info("trainpace: %s; MFU and the roofline are unknown", self._peaks_note)

    # -- FLOPs ----------------------------------------------------------------------------

    def flop_counter(self, samples: int | None = None) -> contextlib.AbstractContextManager[Any]:
        """A context to wrap ONE step in: counts its FLOPs and bytes (the first call only).

        ``samples``: the step's sample count, so rates follow samples when steps differ.
        Later calls, or ``count_flops=False``, give a context that does nothing.
        """
        if not self._count_flops or self._counted:
            return contextlib.nullcontext()
        self._counted = True
        return _CountOnce(self, samples)

    @property
    def step_count(self) -> StepCount | None:
        """What the counted step computed and moved (None before, or if counting failed)."""
        return self._count

    # -- readings (the sampler thread) ----------------------------------------------------

    def _read(self) -> Reading:
        host = self._source("host readings", self._host.read) if self._host else None
        gpus: list[dict[str, Any]] = []
        if self._nvml is not None:
            gpus = self._source("NVML readings", self._nvml.read) or []
        if self._dcgm is not None and gpus:
            fields = self._source("DCGM readings", self._dcgm.read) or {}
            for gpu in gpus:
                gpu.update(fields.get(gpu["index"]) or dict.fromkeys(_DCGM_KEYS))
        flat: dict[str, float | None] = {"sampler.reading": 1.0}
        for key in HOST_KEYS:
            flat[f"host.{key}"] = _number((host or {}).get(key))
        row: dict[str, Any] = {}
        if self.device.type == "cuda":
            gpu = gpus[0] if gpus else {}
            bandwidth = next(((k, gpu[k]) for k in _ROW_BANDWIDTH if gpu.get(k) is not None),
                             (None, None))
            row = {
                "device_util_pct": gpu.get("util_pct"),
                "memory_used_pct": gpu.get("memory_used_pct"),
                "temperature_c": gpu.get("temperature_c"),
                "bandwidth_util_pct": bandwidth[1],
                "bandwidth_source": dict(BANDWIDTH_SOURCES).get(f"gpu.{bandwidth[0]}"),
            }
            for key in (*_GPU_NUMBERS, *_DCGM_KEYS):
                flat[f"gpu.{key}"] = _number(gpu.get(key))
            throttled, reasons = gpu.get("throttled"), gpu.get("throttle_reasons")
            flat["gpu.throttled"] = None if throttled is None else 100.0 * bool(throttled)
            for name in THROTTLE_NAMES:
                flat[f"gpu.throttle.{name}"] = None if reasons is None else 100.0 * (
                    name in reasons)
        else:
            # the CPU is measured through the process; another accelerator (MPS) exposes
            # no utilization: unknown, not the CPU's figures
            main = (host or {}).get("main_cpu_pct") if self.device.type == "cpu" else None
            util = min(100.0, main / self._threads) if main is not None else None
            memory = (host or {}).get("memory_used_pct") if self.device.type == "cpu" else None
            row = {
                "device_util_pct": util,
                "memory_used_pct": memory,
                "temperature_c": None,
                "bandwidth_util_pct": None,
                "bandwidth_source": None,
            }
        for key in ("device_util_pct", "memory_used_pct", "temperature_c"):
            flat[key] = _number(row[key])
        row["host"] = host
        row["gpus"] = gpus
        if self._rapl is not None:
            row["rapl"] = self._source("RAPL readings", self._rapl.read)
        return row, flat

    def _source(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - one source failing leaves the others
            self._fault(what, exc)
            return None

    def drain_rows(self) -> list[dict[str, Any]]:
        """The ``system.jsonl`` rows taken since the last call (``t_s`` first)."""
        try:
            return self._sampler.drain_rows()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("draining sampler rows", exc)
            return []

    # -- the summary sections -------------------------------------------------------------

    def window_figures(self, t_start_s: float, t_end_s: float) -> dict[str, float | None]:
        """The headline readings of one window (time-weighted means), for its console line and
        TensorBoard points: cheaper than :meth:`sections`. Never raises."""
        try:
            window = self._sampler.window(t_start_s, t_end_s)  # every series in one pass
            figures: dict[str, float | None] = {
                key: _mean(window.get(key))
                for key in ("device_util_pct", "memory_used_pct", "temperature_c")
            }
            figures["bandwidth_util_pct"] = None
            for key, _ in BANDWIDTH_SOURCES if self.device.type == "cuda" else ():
                found = window.get(key)
                if found is not None:
                    figures["bandwidth_util_pct"] = found.mean
                    break
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("aggregating a window", exc)
            return {}
        return figures

    def sections(self, *, t_start_s: float, t_end_s: float, step_s: float | None,
                 samples_per_s: float | None) -> tuple[Device, Bandwidth, Flops, Host]:
        """Time-weighted aggregates over ``[t_start_s, t_end_s]`` (seconds since ``t0``), the
        FLOP figures at ``step_s`` / ``samples_per_s``, and the roofline. Never raises."""
        try:
            return self._sections(t_start_s, t_end_s, step_s, samples_per_s)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("aggregating device vitals", exc)
            return Device(kind=self.device.type, name=self._name), Bandwidth(), Flops(), Host()

    def _sections(self, a: float, b: float, step_s: float | None,
                  samples_per_s: float | None) -> tuple[Device, Bandwidth, Flops, Host]:
        window = self._sampler.window(a, b)
        agg = window.get

        util, memory, temperature = agg("device_util_pct"), agg("memory_used_pct"), \
            agg("temperature_c")
        readings = agg("sampler.reading")
        cuda = self.device.type == "cuda"
        gpu = self._gpu
        device_fields: dict[str, Any] = {}
        if cuda:
            reasons = {name: found.mean for name in THROTTLE_NAMES
                       if (found := agg(f"gpu.throttle.{name}")) is not None and found.mean > 0}
            gpm_sm, dcgm_sm = agg("gpu.sm_util_pct"), agg("gpu.dcgm_sm_active_pct")
            activity = "nvml_gpm" if gpm_sm else "dcgm" if dcgm_sm else None
            prefix = "gpu." if gpm_sm else "gpu.dcgm_"
            device_fields = {
                "throttle_pct": _mean(agg("gpu.throttled")),
                "throttle_reasons": reasons if agg("gpu.throttled") else None,
                "memory_used_gb": _mean(agg("gpu.memory_used_gb")),
                "memory_total_gb": gpu.memory_total_gb if gpu else None,
                "slowdown_temperature_c": gpu.slowdown_temperature_c if gpu else None,
                "power_w": _mean(agg("gpu.power_w")),
                "power_limit_w": _mean(agg("gpu.power_limit_w")),
                "sm_clock_mhz": _mean(agg("gpu.sm_clock_mhz")),
                "sm_clock_max_mhz": gpu.sm_clock_max_mhz if gpu else None,
                "pcie_tx_gb_s": _mean(agg("gpu.pcie_tx_gb_s")),
                "pcie_rx_gb_s": _mean(agg("gpu.pcie_rx_gb_s")),
                "sm_active_pct": _mean(gpm_sm or dcgm_sm),
                "sm_occupancy_pct": _mean(agg(f"{prefix}sm_occupancy_pct")) if activity else None,
                "tensor_active_pct": _mean(agg("gpu.tensor_util_pct" if gpm_sm
                                               else "gpu.dcgm_tensor_active_pct")),
                "activity_source": activity,
                "index": gpu.index if gpu else None,
            }
        elif self.device.type == "cpu":
            device_fields = {"memory_total_gb": _mean(agg("host.memory_total_gb"))}
        device = Device(
            kind=self.device.type,
            name=self._name,
            util_pct=_mean(util),
            util_source=None if util is None else
            ("nvml_utilization_gpu" if cuda else "process_cpu"),  # mps: util is None
            util_pct_min=util.min if util else None,
            util_pct_max=util.max if util else None,
            memory_used_pct=_mean(memory),
            memory_used_pct_max=memory.max if memory else None,
            temperature_c=_mean(temperature),
            temperature_c_max=temperature.max if temperature else None,
            samples=readings.readings if readings else 0,
            **device_fields,
        )

        flops, estimate = step_figures(
            self._count, peaks=self._peaks, step_s=step_s, samples_per_s=samples_per_s,
            flops_per_step=self._flops_per_step, dtype=self._dtype,
        )
        sampled, source = None, None
        for key, name in BANDWIDTH_SOURCES if cuda else ():
            sampled = agg(key)
            if sampled is not None:
                source = name
                break
        if sampled is None and estimate.util_pct is not None:
            source = "estimate"
        bandwidth = Bandwidth(
            util_pct=sampled.mean if sampled else estimate.util_pct,
            achieved_gb_s=estimate.achieved_gb_s,
            peak_gb_s=estimate.peak_gb_s,
            source=source,
            util_pct_max=sampled.max if sampled else None,
            estimate_util_pct=estimate.util_pct,
            memory_busy_pct=_mean(agg("gpu.memory_busy_pct")) if cuda else None,
            peak_source=estimate.peak_source,
            error=estimate.error,
        )

        process = agg("host.process_cpu_pct")
        host = Host(
            process_cpu_pct=_mean(process),
            system_cpu_pct=_mean(agg("host.system_cpu_pct")),
            cpu_threads=self._threads,
            rss_gb=_mean(agg("host.rss_gb")),
            available_gb=_mean(agg("host.available_gb")),
            main_process_cpu_pct=_mean(agg("host.main_cpu_pct")),
            process_cpu_pct_max=process.max if process else None,
            memory_total_gb=_mean(agg("host.memory_total_gb")),
            memory_used_pct=_mean(agg("host.memory_used_pct")),
        )
        return device, bandwidth, flops, host

    def meta(self) -> dict[str, Any]:
        """What the run's ``meta.json`` should say about the sources and the peaks."""
        peaks = self._peaks
        return {
            "sampler": {
                "interval_s": self._sampler.interval_s,
                "readings": self._sampler.readings,
                "busy_s": self._sampler.busy_s,
                "dropped_rows": self._sampler.dropped_rows,
                "sources": {
                    "host": self._host is not None,
                    "nvml": self._gpu is not None,
                    "gpm": bool(self._gpu and self._gpu.gpm),
                    "dcgm": self._dcgm is not None,
                },
            },
            "gpu": None if self._gpu is None else {
                "index": self._gpu.index, "uuid": self._gpu.uuid, "name": self._gpu.name,
                "memory_total_gb": self._gpu.memory_total_gb,
                "slowdown_temperature_c": self._gpu.slowdown_temperature_c,
                "sm_clock_max_mhz": self._gpu.sm_clock_max_mhz,
            },
            "peaks": {
                "bandwidth_gb_s": None if peaks.bandwidth_gb_s is None else {
                    "value": peaks.bandwidth_gb_s.value, "source": peaks.bandwidth_gb_s.source},
                "tflops": {k: {"value": p.value, "source": p.source}
                           for k, p in peaks.tflops.items()},
                "note": self._peaks_note,
            },
            "flop_count": {
                "counted": self._count is not None,
                "error": self._count_error,
                "dtype": self._count.dtype if self._count else None,
            },
        }

    # -- containment ----------------------------------------------------------------------

    def _contained(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault(what, exc)

    def _fault(self, what: str, exc: BaseException) -> None:
        if what in self._faults:
            return
        self._faults.add(what)
        logger.warning("trainpace: %s failed (%s: %s); training goes on, those figures are "
                       "null", what, type(exc).__name__, exc)


class _CountOnce:
    """Wraps a :class:`StepCounter` for :meth:`DeviceVitals.flop_counter`; never raises."""

    def __init__(self, vitals: DeviceVitals, samples: int | None) -> None:
        self._vitals = vitals
        self._counter: StepCounter | None = None
        self._samples = samples

    def __enter__(self) -> _CountOnce:
        try:
            counter = StepCounter(samples=self._samples)
            counter.__enter__()
            self._counter = counter
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._vitals._fault("starting the FLOP counter", exc)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        counter = self._counter
        if counter is None:
            return
        try:
            counter.__exit__(exc_type, exc, tb)
        except Exception as error:  # noqa: BLE001 - monitoring never breaks training
            self._vitals._fault("stopping the FLOP counter", error)
            return
        self._vitals._count = counter.result
        self._vitals._count_error = counter.error
        if exc_type is not None:
            self._vitals._counted = False  # the step failed: count the next one instead


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _mean(found: Aggregate | None) -> float | None:
    return found.mean if found is not None else None
