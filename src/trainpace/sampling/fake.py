"""A fake NVML *library* for tests: the real ``nvidia-ml-py`` code runs against it.

:func:`fake_pynvml` loads a private copy of the installed ``pynvml`` module (its own globals,
error classes and function cache; the real module is untouched) and gives it a
:class:`FakeNvmlLibrary` where it would load ``libnvidia-ml.so``. The binding then does
exactly what it does on a GPU machine: it builds the ctypes structs, passes them by
reference, maps return codes to ``NVMLError_*`` classes and reports a function the library
lacks as ``FunctionNotFound``. The fake fills the structs from :class:`FakeGpu` objects that a
test changes between readings (utilization, temperature, throttle bits, a lost GPU...).

Scenarios:
- ``FakeGpu(unsupported={"nvmlDeviceGetPowerUsage"})``: that call answers NOT_SUPPORTED;
- ``fake_pynvml(..., missing={"nvmlDeviceGetCurrentClocksEventReasons"})``: an older driver;
- ``library.errors["nvmlDeviceGetTemperature"] = [NVML_ERROR_UNKNOWN]``: the next call fails;
- ``gpu.lost = True``: every call about that GPU answers GPU_IS_LOST from then on.
"""

from __future__ import annotations

import ctypes
import importlib.util
import itertools
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from trainpace.errors import MissingDependencyError

SUCCESS, NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND = 0, 3, 2, 6
GPU_IS_LOST, UNKNOWN = 15, 999
_ULONGLONG = 3  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
_ids = itertools.count()


@dataclass
class FakeGpu:
    """One fake GPU; change its fields between readings to script a run."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 80 * 10**9
    memory_free: int = 80 * 10**9
    memory_reserved: int = 0
    util_gpu: int = 0
    util_memory: int = 0
    temperature_c: int = 40
    slowdown_c: int = 87
    power_mw: int = 100_000
    power_limit_mw: int = 700_000
    energy_mj: int = 0  # total energy since the driver loaded (a test advances it)
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    clocks_event_reasons: int = 0
    pcie_tx_bytes: int = 0
    pcie_rx_bytes: int = 0
    gpm: dict[int, float] | None = None  # GPM metric id -> value; None: not a GPM device
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)


class FakeNvmlLibrary:
    """Stands where ``CDLL("libnvidia-ml.so.1")`` would: C functions by name."""

    def __init__(self, module: ModuleType, gpus: Iterable[FakeGpu], *,
                 missing: Iterable[str] = (), clock_us: Callable[[], int] | None = None) -> None:
        self.module = module
        self.gpus = list(gpus)
        self.missing = set(missing)
        self.errors: dict[str, list[int]] = {}
        self.calls: list[str] = []
        self.initialized = 0
        self._clock_us = clock_us or (lambda: 0)
        self._devices = [module.struct_c_nvmlDevice_t() for _ in self.gpus]
        self._samples: dict[int, tuple[int, dict[int, float]]] = {}
        self._sample_structs: list[Any] = []

    def __getattr__(self, name: str) -> Callable[..., int]:
        if name.startswith("_") or name in self.missing:
            raise AttributeError(name)
        implementation = _FUNCTIONS.get(name)
        if implementation is None:
            raise AttributeError(name)

        def c_function(*args: Any) -> int:
            self.calls.append(name)
            queued = self.errors.get(name)
            if queued:
                return queued.pop(0)
            return implementation(self, *args)

        return c_function

    def gpu(self, handle: Any) -> FakeGpu | None:
        """The fake GPU behind a device handle."""
        address = ctypes.addressof(handle.contents)
        for gpu, device in zip(self.gpus, self._devices, strict=True):
            if ctypes.addressof(device) == address:
                return gpu
        return None


def _out(ref: Any) -> Any:
    """The object a ``byref(...)`` argument points at."""
    return ref._obj


def _device_call(fill: Callable[[FakeNvmlLibrary, FakeGpu, Any], None], name: str,
                 ) -> Callable[..., int]:
    """A device function: checks the handle, a lost GPU and NOT_SUPPORTED, then fills."""

    def call(library: FakeNvmlLibrary, handle: Any, *args: Any) -> int:
        gpu = library.gpu(handle)
        if gpu is None:
            return INVALID_ARGUMENT
        if gpu.lost:
            return GPU_IS_LOST
        if name in gpu.unsupported:
            return NOT_SUPPORTED
        fill(library, gpu, args)
        return SUCCESS

    return call


def _set(ref: Any, value: Any) -> None:
    _out(ref).value = value


def _handle_by_index(library: FakeNvmlLibrary, index: Any, ref: Any) -> int:
    i = index.value
    if not 0 <= i < len(library.gpus):
        return INVALID_ARGUMENT
    _out(ref).contents = library._devices[i]
    return SUCCESS


def _handle_by_uuid(library: FakeNvmlLibrary, uuid: Any, ref: Any) -> int:
    wanted = uuid.value.decode() if isinstance(uuid.value, bytes) else uuid.value
    for gpu, device in zip(library.gpus, library._devices, strict=True):
        if gpu.uuid == wanted:
            _out(ref).contents = device
            return SUCCESS
    return NOT_FOUND


def _memory(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
    memory = _out(args[0])
    memory.total = gpu.memory_total
    memory.free = gpu.memory_free
    if hasattr(memory, "reserved"):  # v2: "used" is allocated memory, reserved apart
        memory.reserved = gpu.memory_reserved
        memory.used = gpu.memory_total - gpu.memory_free - gpu.memory_reserved
    else:
        memory.used = gpu.memory_total - gpu.memory_free


def _utilization(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
    util = _out(args[0])
    util.gpu = gpu.util_gpu
    util.memory = gpu.util_memory


def _field_values(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
    count, values = args[0].value, _out(args[1])
    counters = {197: gpu.pcie_tx_bytes, 198: gpu.pcie_rx_bytes}
    for i in range(count):
        value = values[i]
        value.timestamp = library._clock_us()
        if value.fieldId in counters:
            value.nvmlReturn = SUCCESS
            value.valueType = _ULONGLONG
            value.value.ullVal = counters[value.fieldId]
        else:
            value.nvmlReturn = NOT_SUPPORTED


def _gpm_support(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
    _out(args[0]).isSupportedDevice = 1 if gpu.gpm is not None else 0


def _gpm_sample_alloc(library: FakeNvmlLibrary, ref: Any) -> int:
    sample = library.module.struct_c_nvmlGpmSample_t()
    library._sample_structs.append(sample)
    _out(ref).contents = sample
    return SUCCESS


def _gpm_sample_get(library: FakeNvmlLibrary, handle: Any, sample: Any) -> int:
    gpu = library.gpu(handle)
    if gpu is None:
        return INVALID_ARGUMENT
    if gpu.lost:
        return GPU_IS_LOST
    if gpu.gpm is None:
        return NOT_SUPPORTED
    library._samples[ctypes.addressof(sample.contents)] = (library.gpus.index(gpu), dict(gpu.gpm))
    return SUCCESS


def _gpm_metrics_get(library: FakeNvmlLibrary, ref: Any) -> int:
    request = _out(ref)
    second = library._samples.get(ctypes.addressof(request.sample2.contents))
    if second is None or ctypes.addressof(request.sample1.contents) not in library._samples:
        return INVALID_ARGUMENT
    values = second[1]
    for i in range(request.numMetrics):
        metric = request.metrics[i]
        if metric.metricId in values:
            metric.value = values[metric.metricId]
            metric.nvmlReturn = SUCCESS
        else:
            metric.nvmlReturn = NOT_SUPPORTED
    return SUCCESS


def _string(attribute: str) -> Callable[[FakeNvmlLibrary, FakeGpu, Any], None]:
    def fill(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
        args[0].value = getattr(gpu, attribute).encode()

    return fill


def _value(getter: Callable[[FakeGpu, Any], int], at: int = 0,
           ) -> Callable[[FakeNvmlLibrary, FakeGpu, Any], None]:
    def fill(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
        _set(args[at], getter(gpu, args))

    return fill


_THRESHOLDS = {1: "slowdown_c"}  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN


def _threshold(library: FakeNvmlLibrary, gpu: FakeGpu, args: Any) -> None:
    attribute = _THRESHOLDS.get(args[0].value)
    _set(args[1], getattr(gpu, attribute) if attribute else 0)


_DEVICE_FILLS: Mapping[str, Callable[[FakeNvmlLibrary, FakeGpu, Any], None]] = {
    "nvmlDeviceGetName": _string("name"),
    "nvmlDeviceGetUUID": _string("uuid"),
    "nvmlDeviceGetIndex": lambda lib, gpu, args: _set(args[0], lib.gpus.index(gpu)),
    "nvmlDeviceGetMemoryInfo": _memory,
    "nvmlDeviceGetMemoryInfo_v2": _memory,
    "nvmlDeviceGetUtilizationRates": _utilization,
    "nvmlDeviceGetTemperature": _value(lambda gpu, args: gpu.temperature_c, at=1),
    "nvmlDeviceGetTemperatureThreshold": _threshold,
    "nvmlDeviceGetPowerUsage": _value(lambda gpu, args: gpu.power_mw),
    "nvmlDeviceGetEnforcedPowerLimit": _value(lambda gpu, args: gpu.power_limit_mw),
    "nvmlDeviceGetTotalEnergyConsumption": _value(lambda gpu, args: gpu.energy_mj),
    "nvmlDeviceGetClockInfo": _value(lambda gpu, args: gpu.sm_clock_mhz, at=1),
    "nvmlDeviceGetMaxClockInfo": _value(lambda gpu, args: gpu.sm_clock_max_mhz, at=1),
    "nvmlDeviceGetCurrentClocksEventReasons": _value(lambda gpu, args: gpu.clocks_event_reasons),
    "nvmlDeviceGetCurrentClocksThrottleReasons": _value(
        lambda gpu, args: gpu.clocks_event_reasons),
    "nvmlDeviceGetFieldValues": _field_values,
    "nvmlGpmQueryDeviceSupport": _gpm_support,
}

_FUNCTIONS: dict[str, Callable[..., int]] = {
    name: _device_call(fill, name) for name, fill in _DEVICE_FILLS.items()
}


def _count(library: FakeNvmlLibrary, ref: Any) -> int:
    _set(ref, len(library.gpus))
    return SUCCESS


def _init(library: FakeNvmlLibrary, *args: Any) -> int:
    library.initialized += 1
    return SUCCESS


def _shutdown(library: FakeNvmlLibrary) -> int:
    library.initialized -= 1
    return SUCCESS


_FUNCTIONS.update({
    "nvmlInitWithFlags": _init,
    "nvmlInit_v2": _init,
    "nvmlShutdown": _shutdown,
    "nvmlDeviceGetCount_v2": _count,
    "nvmlDeviceGetHandleByIndex_v2": _handle_by_index,
    "nvmlDeviceGetHandleByUUID": _handle_by_uuid,
    "nvmlGpmSampleAlloc": _gpm_sample_alloc,
    "nvmlGpmSampleFree": lambda library, sample: SUCCESS,
    "nvmlGpmSampleGet": _gpm_sample_get,
    "nvmlGpmMetricsGet": _gpm_metrics_get,
})


@dataclass
class FakeNvml:
    """A private ``pynvml`` copy wired to a fake library, and that library."""

    pynvml: ModuleType
    library: FakeNvmlLibrary

    @property
    def gpus(self) -> list[FakeGpu]:
        """The fake GPUs (change them between readings)."""
        return self.library.gpus


def fake_pynvml(gpus: Iterable[FakeGpu] = (), *, missing: Iterable[str] = (),
                clock_us: Callable[[], int] | None = None) -> FakeNvml:
    """A private copy of nvidia-ml-py's ``pynvml`` that talks to a :class:`FakeNvmlLibrary`."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None:
        raise MissingDependencyError("the fake NVML library", "nvml")
    name = f"_trainpace_fake_pynvml_{next(_ids)}"
    private = importlib.util.spec_from_file_location(name, spec.origin)
    assert private is not None
    assert private.loader is not None
    module = importlib.util.module_from_spec(private)
    sys.modules[name] = module  # the binding looks itself up while it builds its error classes
    try:
        private.loader.exec_module(module)
    finally:
        del sys.modules[name]
    library = FakeNvmlLibrary(module, list(gpus) or [FakeGpu()], missing=missing,
                              clock_us=clock_us)
    module.nvmlLib = library  # type: ignore[attr-defined]
    return FakeNvml(pynvml=module, library=library)
