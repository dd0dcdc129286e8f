"""Peak memory bandwidth and dense FLOP/s of common training devices, every number cited.

*Dense* means without 2:4 structured sparsity: vendor sheets print tensor-core rates with
sparsity (marked with an asterisk), twice the dense rate, so the dense value is that figure
halved. bfloat16/float16 tensor rates are with FP32 accumulate (what mixed-precision training
runs); float32 is the non-tensor (CUDA-core or vector) rate; tf32 is float32 matmul on tensor
cores. A dtype the hardware lacks is absent, never zero.

Names are matched case-insensitively after normalising separators. Each spec carries its own
rule (a pattern, an exclusion, a memory range), and a name resolves only when exactly one
spec accepts it: a device that matches none, or several (an A100 whose name says neither
SXM nor PCIe), is *unknown*, never given another device's peak. Users override any figure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainpace.errors import ConfigError

DTYPES: tuple[str, ...] = ("float32", "tf32", "bfloat16", "float16", "float8")

_DTYPE_ALIASES: Mapping[str, str] = {
    "float32": "float32", "fp32": "float32", "f32": "float32", "float": "float32",
    "tf32": "tf32", "tfloat32": "tf32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
    "float8": "float8", "fp8": "float8", "float8_e4m3fn": "float8", "float8_e5m2": "float8",
    "float8_e4m3fnuz": "float8", "float8_e5m2fnuz": "float8",
}


def canonical_dtype(name: str) -> str:
    """The table's key for a dtype name (``"bf16"``, ``"torch.bfloat16"`` → ``"bfloat16"``)."""
    key = str(name).lower().removeprefix("torch.")
    try:
        return _DTYPE_ALIASES[key]
    except KeyError:
        raise ConfigError("dtype", name, f"must be one of {', '.join(DTYPES)}") from None


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """One device's published peaks and the rule that recognises its name."""

    name: str
    pattern: str  # regex searched in the normalised device name
    exclude: str | None = None  # regex that must not occur
    memory_gb: tuple[float, float] | None = None  # accepted memory range [low, high)
    bandwidth_gb_s: float
    tflops: Mapping[str, float]  # dense, keyed by DTYPES
    source: str


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
_H100 = (
    "NVIDIA H100 Tensor Core GPU datasheet "
    "(resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
)
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200)"
_V100 = "NVIDIA Tesla V100 GPU datasheet (nvidia.com/en-us/data-center/v100)"
_HALVED = "; dense = the sheet's sparse tensor figure / 2"

SPECS: tuple[DeviceSpec, ...] = (
    DeviceSpec(
        name="NVIDIA A100 SXM4 40GB", pattern=r"\ba100\b.*\bsxm", memory_gb=(30, 60),
        bandwidth_gb_s=1555,
        tflops={"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312},
        source=_A100 + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA A100 SXM4 80GB", pattern=r"\ba100\b.*\bsxm", memory_gb=(60, 100),
        bandwidth_gb_s=2039,
        tflops={"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312},
        source=_A100 + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA A100 PCIe 40GB", pattern=r"\ba100\b.*\bpcie\b", memory_gb=(30, 60),
        bandwidth_gb_s=1555,
        tflops={"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312},
        source=_A100 + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA A100 PCIe 80GB", pattern=r"\ba100\b.*\bpcie\b", memory_gb=(60, 100),
        bandwidth_gb_s=1935,
        tflops={"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312},
        source=_A100 + _HALVED,
    ),
    DeviceSpec(
        # NVML and CUDA call the SXM5 board "NVIDIA H100 80GB HBM3"; the PCIe card has HBM2e.
        name="NVIDIA H100 SXM", pattern=r"\bh100\b.*\b(sxm|hbm3)", exclude=r"\b(pcie|nvl)\b",
        bandwidth_gb_s=3350,
        tflops={"float32": 67, "tf32": 494.5, "bfloat16": 989.5, "float16": 989.5, "float8": 1979},
        source=_H100 + ", SXM column" + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA H100 PCIe", pattern=r"\bh100\b.*\bpcie\b",
        bandwidth_gb_s=2000,
        tflops={"float32": 51, "tf32": 378, "bfloat16": 756.5, "float16": 756.5, "float8": 1513},
        source=_H100 + ", PCIe column" + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA H100 NVL", pattern=r"\bh100\b.*\bnvl\b",
        bandwidth_gb_s=3900,
        tflops={"float32": 60, "tf32": 417.5, "bfloat16": 835.5, "float16": 835.5,
                "float8": 1670.5},
        source="NVIDIA H100 NVL datasheet (2024, one 94 GB card)" + _HALVED,
    ),
    DeviceSpec(
        # "NVIDIA H200" is the SXM board; the PCIe card is named "NVIDIA H200 NVL".
        name="NVIDIA H200 SXM", pattern=r"\bh200\b", exclude=r"\bnvl\b",
        bandwidth_gb_s=4800,
        tflops={"float32": 67, "tf32": 494.5, "bfloat16": 989.5, "float16": 989.5, "float8": 1979},
        source=_H200 + ", SXM column" + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA H200 NVL", pattern=r"\bh200\b.*\bnvl\b",
        bandwidth_gb_s=4800,
        tflops={"float32": 60, "tf32": 417.5, "bfloat16": 835.5, "float16": 835.5,
                "float8": 1670.5},
        source=_H200 + ", NVL column" + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA B200", pattern=r"\bb200\b",
        bandwidth_gb_s=7700,
        tflops={"float32": 75, "tf32": 1125, "bfloat16": 2250, "float16": 2250, "float8": 4500},
        source="NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), 8-GPU totals / 8"
        + _HALVED + "; early sheets said 8,000 GB/s",
    ),
    DeviceSpec(
        name="NVIDIA L4", pattern=r"\bl4\b",
        bandwidth_gb_s=300,
        tflops={"float32": 30.3, "tf32": 60, "bfloat16": 121, "float16": 121, "float8": 242.5},
        source="NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4)" + _HALVED,
    ),
    DeviceSpec(
        name="NVIDIA L40S", pattern=r"\bl40s\b",
        bandwidth_gb_s=864,
        tflops={"float32": 91.6, "tf32": 183, "bfloat16": 362.05, "float16": 362.05, "float8": 733},
        source="NVIDIA L40S GPU datasheet (nvidia.com/en-us/data-center/l40s), dense column",
    ),
    DeviceSpec(
        name="NVIDIA A10", pattern=r"\ba10\b",
        bandwidth_gb_s=600,
        tflops={"float32": 31.2, "tf32": 62.5, "bfloat16": 125, "float16": 125},
        source="NVIDIA A10 Tensor Core GPU datasheet "
        "(nvidia.com/en-us/data-center/products/a10-gpu)" + _HALVED,
    ),
    DeviceSpec(
        # NVIDIA publishes no A10G sheet; its tensor rate differs from the A10's. Bandwidth only.
        name="NVIDIA A10G", pattern=r"\ba10g\b",
        bandwidth_gb_s=600,
        tflops={},
        source="AWS EC2 G5 (A10G, 24 GB GDDR6, same memory system as the A10); FLOP/s are not "
        "published: measure them with `trainpace ceilings`",
    ),
    DeviceSpec(
        name="NVIDIA T4", pattern=r"\bt4\b",
        bandwidth_gb_s=320,
        tflops={"float32": 8.1, "float16": 65},
        source="NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4); "
        "no bfloat16 or tf32 on Turing",
    ),
    DeviceSpec(
        name="NVIDIA V100 SXM2", pattern=r"\bv100 sxm2\b",
        bandwidth_gb_s=900,
        tflops={"float32": 15.7, "float16": 125},
        source=_V100 + ", SXM2 column; no bfloat16 or tf32 on Volta",
    ),
    DeviceSpec(
        name="NVIDIA V100 PCIe", pattern=r"\bv100 pcie\b",
        bandwidth_gb_s=900,
        tflops={"float32": 14, "float16": 112},
        source=_V100 + ", PCIe column; no bfloat16 or tf32 on Volta",
    ),
    DeviceSpec(
        name="NVIDIA V100S PCIe", pattern=r"\bv100s\b",
        bandwidth_gb_s=1134,
        tflops={"float32": 16.4, "float16": 130},
        source="NVIDIA V100S datasheet (V100S PCIe column); no bfloat16 or tf32 on Volta",
    ),
    DeviceSpec(
        name="NVIDIA GeForce RTX 3090", pattern=r"\brtx 3090\b", exclude=r"\bti\b",
        bandwidth_gb_s=936,
        tflops={"float32": 35.6, "tf32": 35.6, "bfloat16": 71, "float16": 71},
        source="NVIDIA Ampere GA102 GPU architecture whitepaper v2, RTX 3090 column; tensor "
        "rates with FP32 accumulate (GeForce runs FP16 accumulate at twice that)",
    ),
    DeviceSpec(
        name="NVIDIA GeForce RTX 4090", pattern=r"\brtx 4090\b", exclude=r"\b(d|laptop|mobile)\b",
        bandwidth_gb_s=1008,
        tflops={"float32": 82.6, "tf32": 82.6, "bfloat16": 165.2, "float16": 165.2,
                "float8": 330.3},
        source="NVIDIA Ada GPU architecture whitepaper, RTX 4090 column; tensor rates with "
        "FP32 accumulate (FP16 accumulate is twice that)",
    ),
    DeviceSpec(
        name="AMD Instinct MI300X", pattern=r"\bmi300x\b",
        bandwidth_gb_s=5300,
        tflops={"float32": 163.4, "tf32": 653.7, "bfloat16": 1307.4, "float16": 1307.4,
                "float8": 2614.9},
        source="AMD Instinct MI300X specifications (amd.com/en/products/accelerators/instinct/"
        "mi300/mi300x.html), dense figures",
    ),
)


def normalize_name(name: str) -> str:
    """Lower case, separators (``-``, ``_``, ``/``) as spaces, runs of spaces collapsed."""
    return " ".join(re.sub(r"[-_/,()]", " ", name.lower()).split())


_NAME_MEMORY = re.compile(r"\b(\d+)\s?gb\b")


def matching_specs(name: str, *, memory_gb: float | None = None) -> list[DeviceSpec]:
    """Every spec whose rule accepts ``name`` (a size in the name beats ``memory_gb``)."""
    normalized = normalize_name(name)
    sized = _NAME_MEMORY.search(normalized)
    memory = float(sized.group(1)) if sized else memory_gb
    found = []
    for spec in SPECS:
        if not re.search(spec.pattern, normalized):
            continue
        if spec.exclude and re.search(spec.exclude, normalized):
            continue
        if spec.memory_gb is not None:
            low, high = spec.memory_gb
            if memory is None or not low <= memory < high:
                continue
        found.append(spec)
    return found


def match_spec(name: str | None, *, memory_gb: float | None = None) -> DeviceSpec | None:
    """The one spec for a device name, or None when none or several match (unknown).

    ``memory_gb`` (the device's total memory, e.g. from NVML) tells the A100 40 GB and
    80 GB apart when the name does not.
    """
    if not name:
        return None
    found = matching_specs(name, memory_gb=memory_gb)
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Peak:
    """One peak figure and where it came from."""

    value: float
    source: str


@dataclass(frozen=True, kw_only=True)
class Peaks:
    """The peaks a run is measured against: bandwidth (GB/s) and dense TFLOP/s per dtype."""

    bandwidth_gb_s: Peak | None = None
    tflops: Mapping[str, Peak] = field(default_factory=dict)

    def flops(self, dtype: str) -> Peak | None:
        """The TFLOP/s peak for ``dtype`` (any alias), or None."""
        return self.tflops.get(canonical_dtype(dtype))

    def merged_over(self, other: Peaks) -> Peaks:
        """These peaks, with the figures they lack taken from ``other``."""
        return Peaks(
            bandwidth_gb_s=self.bandwidth_gb_s or other.bandwidth_gb_s,
            tflops={**other.tflops, **self.tflops},
        )


def spec_peaks(spec: DeviceSpec) -> Peaks:
    """The table's figures for ``spec``, each naming its source."""
    return Peaks(
        bandwidth_gb_s=Peak(spec.bandwidth_gb_s, f"specs: {spec.name} ({spec.source})"),
        tflops={
            dtype: Peak(value, f"specs: {spec.name} {dtype} dense ({spec.source})")
            for dtype, value in spec.tflops.items()
        },
    )


def _positive(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, value, "must be a positive number")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(key, value, "must be a positive number")
    return number


def override_peaks(value: Peaks | Mapping[str, object], *, source: str = "override") -> Peaks:
    """User-given peaks, validated: a :class:`Peaks`, or a mapping like
    ``{"bandwidth_gb_s": 900, "tflops": {"bf16": 120}}`` (numbers in GB/s and TFLOP/s)."""
    if isinstance(value, Peaks):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError("peaks", value, "must be a Peaks or a mapping with bandwidth_gb_s/tflops")
    unknown = sorted(set(value) - {"bandwidth_gb_s", "tflops"})
    if unknown:
        raise ConfigError("peaks", unknown, "may only have the keys bandwidth_gb_s and tflops")
    bandwidth = None
    if value.get("bandwidth_gb_s") is not None:
        bandwidth = Peak(_positive("peaks.bandwidth_gb_s", value["bandwidth_gb_s"]), source)
    raw = value.get("tflops") or {}
    if not isinstance(raw, Mapping):
        raise ConfigError("peaks.tflops", raw, "must map dtype names to TFLOP/s")
    tflops = {
        canonical_dtype(dtype): Peak(_positive(f"peaks.tflops.{dtype}", number), source)
        for dtype, number in raw.items()
    }
    return Peaks(bandwidth_gb_s=bandwidth, tflops=tflops)


def table_peaks(name: str | None, *, memory_gb: float | None = None) -> Peaks:
    """The table's peaks for a device name; empty :class:`Peaks` when the device is unknown."""
    spec = match_spec(name, memory_gb=memory_gb)
    return spec_peaks(spec) if spec is not None else Peaks()
