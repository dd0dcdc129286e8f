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

The parts: :mod:`~trainpace.measure.device_sources` opens and reads the sources,
:mod:`~trainpace.measure.device_peaks` resolves the peaks, and
:mod:`~trainpace.measure.device_sections` turns a sampler window into the summary's sections;
this facade owns their lifetime, the FLOP count of one step, and the containment of failures.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import torch

from trainpace.devices.specs import Peaks, override_peaks
from trainpace.errors import ConfigError
from trainpace.measure import device_sections
from trainpace.measure.device_peaks import peaks_meta, resolve_peaks
from trainpace.measure.device_sources import BANDWIDTH_SOURCES, DeviceSources
from trainpace.measure.flops import StepCount, StepCounter
from trainpace.sampling.sampler import Sampler, is_positive_number
from trainpace.summary import Bandwidth, Device, Flops, Host

__all__ = ["BANDWIDTH_SOURCES", "DeviceVitals", "default_interval_s"]

logger = logging.getLogger(__name__)

# The sampler's period, by what it reads. NVML's readings are gauges (temperature, power,
# clocks) and utilization over the driver's last sample period (1/6 s to 1 s): 10 Hz sees them
# change. The host's CPU figures are differences of cumulative counters, so a window's mean is
# the same at any rate; its memory, its workers and system.jsonl's rows come once a second
# anyway: once a second is all a run on the CPU needs (a reading and the thread's wake took
# 0.25-1 ms of CPU each on a 2-core virtual machine, cold after a training step: 0.20% of a
# core at two a second beside a DataLoader worker, 0.14% at one).
GPU_INTERVAL_S = 0.1
HOST_INTERVAL_S = 1.0


def default_interval_s(device: str | torch.device) -> float:
    """The sampler's period for a run on ``device``: ``GPU_INTERVAL_S`` where NVML is read (a
    CUDA device), else ``HOST_INTERVAL_S`` (the host's counters alone)."""
    return GPU_INTERVAL_S if torch.device(device).type == "cuda" else HOST_INTERVAL_S


class DeviceVitals:
    """Samples the metered device and the host; turns a counted step into FLOP figures.

    Args:
        device: the device the training runs on (``cpu``, ``cuda[:N]``).
        interval_s: sampling period (None: :func:`default_interval_s` of ``device``).
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
        interval_s: float | None = None,
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
        self._sources = DeviceSources(self.device, clock=clock, nvml=nvml, dcgm=dcgm,
                                      host=host, fault=self._fault)
        if interval_s is None:
            interval_s = default_interval_s(self.device)
        self._sampler = Sampler(self._sources.read, interval_s=interval_s, clock=clock, t0=t0)
        self._flops_per_step = float(flops_per_step) if flops_per_step is not None else None
        self._count_flops = count_flops
        self._dtype = dtype
        self._peaks = self._user_peaks or Peaks()
        self._peaks_note: str | None = None
        self._count: StepCount | None = None
        self._count_error: str | None = None
        self._count_cpu_s: float | None = None  # CPU time of the counted ops, counting included
        self._counted = False
        # the highest matmul rate a window reached, per dtype ("matmul float32": TFLOP/s): a
        # cached ceiling below it is wrong and measured again after the loop
        self._achieved: dict[str, float] = {}
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
        sources = self._sources
        sources.threads = torch.get_num_threads()
        self._contained("opening the host readings", sources.open_host)
        if self.device.type == "cuda":
            self._contained("opening NVML", sources.open_nvml)
            self._contained("opening DCGM", lambda: sources.open_dcgm(self._sampler.interval_s))
        self._contained("naming the device", sources.resolve_name)
        self._contained("resolving the peaks", self._resolve_peaks)
        self._contained("starting the sampler", self._sampler.start)

    def stop(self) -> None:
        """Join the sampler (after a last reading) and close NVML/DCGM. Never raises."""
        self._contained("stopping the sampler", self._sampler.stop)
        self._sources.close(self._contained)

    def sample_once(self) -> dict[str, Any] | None:
        """Take one reading now, without the thread (tests, a manual clock)."""
        return self._sampler.sample_once()

    @property
    def interval_s(self) -> float:
        """The sampler's period."""
        return self._sampler.interval_s

    @property
    def threads(self) -> int:
        """The torch threads of the run (the CPU's 100%-per-thread scale, its ceiling's key)."""
        return self._sources.threads

    @property
    def achieved(self) -> dict[str, float]:
        """The highest matmul rate the run's windows reached, per dtype (``"matmul
        float32"``: TFLOP/s); the bandwidth estimate is left out (counted bytes that stay in
        cache overstate DRAM traffic: above the peak, the estimate is wrong, not the peak)."""
        return dict(self._achieved)

    def refresh_peaks(self) -> None:
        """Read the peaks again (a ceiling was measured after the loop)."""
        self._contained("resolving the peaks", self._resolve_peaks)

    def _resolve_peaks(self) -> None:
        sources = self._sources
        self._peaks, self._peaks_note = resolve_peaks(self.device, sources.name, sources.gpu,
                                                      self._user_peaks)
        if self._peaks_note is not None:
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

    # -- rows and the summary sections ----------------------------------------------------

    def drain_rows(self) -> list[dict[str, Any]]:
        """The ``system.jsonl`` rows taken since the last call (``t_s`` first)."""
        try:
            return self._sampler.drain_rows()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("draining sampler rows", exc)
            return []

    def window_figures(self, t_start_s: float, t_end_s: float) -> dict[str, float | None]:
        """The headline readings of one window (time-weighted means), for its console line and
        TensorBoard points: cheaper than :meth:`sections`. Never raises."""
        try:
            window = self._sampler.window(t_start_s, t_end_s)  # every series in one pass
            return device_sections.window_figures(window, self.device.type)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("aggregating a window", exc)
            return {}

    def window_signs(self, t_start_s: float, t_end_s: float) -> dict[str, float | None]:
        """A window's device and host signs for the other ranks (util, temperature,
        throttling, this process's and the host's CPU): time-weighted means over
        ``[t_start_s, t_end_s]``. Never raises."""
        try:
            return device_sections.window_signs(self._sampler.window(t_start_s, t_end_s),
                                                self.device.type)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("aggregating a window's signs", exc)
            return {}

    def sections(self, *, t_start_s: float, t_end_s: float, step_s: float | None,
                 samples_per_s: float | None) -> tuple[Device, Bandwidth, Flops, Host]:
        """Time-weighted aggregates over ``[t_start_s, t_end_s]`` (seconds since ``t0``), the
        FLOP figures at ``step_s`` / ``samples_per_s``, and the roofline. Never raises."""
        sources = self._sources
        try:
            facts = device_sections.Facts(
                kind=self.device.type, name=sources.name, gpu=sources.gpu,
                threads=sources.threads, count=self._count, peaks=self._peaks,
                flops_per_step=self._flops_per_step, dtype=self._dtype)
            found = device_sections.sections(self._sampler.window(t_start_s, t_end_s), facts,
                                             step_s, samples_per_s)
            flops = found[2]
            if flops.achieved_tflops is not None and flops.dtype is not None:
                key = f"matmul {flops.dtype}"
                self._achieved[key] = max(self._achieved.get(key, 0.0), flops.achieved_tflops)
            return found
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("aggregating device vitals", exc)
            return Device(kind=self.device.type, name=sources.name), Bandwidth(), Flops(), Host()

    def meta(self) -> dict[str, Any]:
        """What the run's ``meta.json`` should say about the sources and the peaks."""
        gpu = self._sources.gpu
        return {
            "sampler": {
                "interval_s": self._sampler.interval_s,
                "readings": self._sampler.readings,
                "busy_s": self._sampler.busy_s,
                "dropped_rows": self._sampler.dropped_rows,
                "sources": {
                    "host": self._sources.host is not None,
                    "nvml": gpu is not None,
                    "gpm": bool(gpu and gpu.gpm),
                    "dcgm": self._sources.dcgm is not None,
                },
            },
            "gpu": None if gpu is None else {
                "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name,
                "memory_total_gb": gpu.memory_total_gb,
                "slowdown_temperature_c": gpu.slowdown_temperature_c,
                "sm_clock_max_mhz": gpu.sm_clock_max_mhz,
            },
            "peaks": peaks_meta(self._peaks, self._peaks_note),
            "flop_count": {
                "counted": self._count is not None,
                "error": self._count_error,
                # trainpace's first-step work: the counted step's ops ran under counting
                "ops_cpu_s": self._count_cpu_s,
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
        self._vitals._count_cpu_s = counter.ops_cpu_s
        if exc_type is not None:
            self._vitals._counted = False  # the step failed: count the next one instead
