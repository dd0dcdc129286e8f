import pytest

from trainpace.devices.specs import (
    DTYPES,
    SPECS,
    Peak,
    Peaks,
    canonical_dtype,
    match_spec,
    matching_specs,
    override_peaks,
    spec_peaks,
    table_peaks,
)
from trainpace.errors import ConfigError

# Names as NVML / torch.cuda.get_device_name() report them, with the spec each must resolve to.
KNOWN = [
    ("NVIDIA A100-SXM4-40GB", None, "NVIDIA A100 SXM4 40GB"),
    ("NVIDIA A100-SXM4-80GB", None, "NVIDIA A100 SXM4 80GB"),
    ("NVIDIA A100-PCIE-40GB", None, "NVIDIA A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", None, "NVIDIA A100 PCIe 80GB"),
    ("NVIDIA A100-SXM4", 79.2, "NVIDIA A100 SXM4 80GB"),  # size from NVML's total memory
    ("NVIDIA H100 80GB HBM3", None, "NVIDIA H100 SXM"),
    ("NVIDIA H100 SXM5 80GB", None, "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", None, "NVIDIA H100 PCIe"),
    ("NVIDIA H100 NVL", None, "NVIDIA H100 NVL"),
    ("NVIDIA H200", 140.4, "NVIDIA H200 SXM"),
    ("NVIDIA H200 NVL", None, "NVIDIA H200 NVL"),
    ("NVIDIA B200", None, "NVIDIA B200"),
    ("NVIDIA L4", None, "NVIDIA L4"),
    ("NVIDIA L40S", None, "NVIDIA L40S"),
    ("NVIDIA A10", None, "NVIDIA A10"),
    ("NVIDIA A10G", None, "NVIDIA A10G"),
    ("Tesla T4", None, "NVIDIA T4"),
    ("Tesla V100-SXM2-16GB", None, "NVIDIA V100 SXM2"),
    ("Tesla V100-SXM2-32GB", None, "NVIDIA V100 SXM2"),
    ("Tesla V100-PCIE-16GB", None, "NVIDIA V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", None, "NVIDIA V100S PCIe"),
    ("NVIDIA GeForce RTX 3090", None, "NVIDIA GeForce RTX 3090"),
    ("NVIDIA GeForce RTX 4090", None, "NVIDIA GeForce RTX 4090"),
    ("AMD Instinct MI300X", None, "AMD Instinct MI300X"),
    ("nvidia h100 80gb hbm3", None, "NVIDIA H100 SXM"),  # case does not matter
]

# Names that must stay unknown: another device's peak would be wrong.
UNKNOWN = [
    "NVIDIA A100",  # neither SXM nor PCIe, no size: ambiguous
    "NVIDIA H100",  # SXM and PCIe share 80 GB: ambiguous without a form factor
    "NVIDIA L40",  # not L4, not L40S
    "NVIDIA GH200 480GB",  # not an H200
    "NVIDIA GB200",  # not a B200
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 4090 D",
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "Tesla V100-SXM3-32GB",
    "NVIDIA RTX A6000",
    "AMD EPYC 7763 64-Core Processor",
    "",
]


@pytest.mark.parametrize(("name", "memory_gb", "expected"), KNOWN)
def test_known_names_resolve_to_exactly_their_spec(name, memory_gb, expected):
    assert [s.name for s in matching_specs(name, memory_gb=memory_gb)] == [expected]
    spec = match_spec(name, memory_gb=memory_gb)
    assert spec is not None
    assert spec.name == expected


@pytest.mark.parametrize("name", UNKNOWN)
def test_other_names_are_unknown(name):
    assert match_spec(name) is None
    assert table_peaks(name) == Peaks()


def test_a100_without_size_in_name_uses_nvml_memory_and_stays_unknown_without_it():
    assert match_spec("NVIDIA A100-PCIE", memory_gb=40.0).name == "NVIDIA A100 PCIe 40GB"
    assert match_spec("NVIDIA A100-PCIE") is None
    assert match_spec("NVIDIA A100-PCIE", memory_gb=16.0) is None


def test_every_spec_cites_a_source_and_uses_known_dtypes():
    for spec in SPECS:
        assert len(spec.source) > 20, spec.name
        assert set(spec.tflops) <= set(DTYPES), spec.name
        assert spec.bandwidth_gb_s > 0
        assert all(v > 0 for v in spec.tflops.values())


def test_dense_values_for_a_few_devices():
    h100 = match_spec("NVIDIA H100 80GB HBM3")
    assert h100.tflops["bfloat16"] == 989.5
    assert h100.bandwidth_gb_s == 3350
    assert "float8" not in match_spec("Tesla T4").tflops
    assert "bfloat16" not in match_spec("Tesla V100-SXM2-16GB").tflops
    assert match_spec("NVIDIA A10G").tflops == {}


def test_spec_peaks_name_the_source_and_dtype():
    peaks = spec_peaks(match_spec("NVIDIA L4"))
    assert peaks.flops("bf16") == Peak(121, peaks.tflops["bfloat16"].source)
    assert peaks.tflops["bfloat16"].source.startswith("specs: NVIDIA L4 bfloat16 dense (NVIDIA L4")
    assert peaks.bandwidth_gb_s.value == 300
    assert peaks.flops("float8").value == 242.5


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("bf16", "bfloat16"), ("torch.float16", "float16"), ("FP32", "float32"),
     ("tfloat32", "tf32"), ("float8_e4m3fn", "float8"), ("half", "float16")],
)
def test_dtype_aliases(alias, canonical):
    assert canonical_dtype(alias) == canonical


def test_unknown_dtype_is_a_config_error():
    with pytest.raises(ConfigError, match="dtype must be one of float32, tf32"):
        canonical_dtype("int4")


def test_override_from_mapping_wins_over_the_table():
    table = table_peaks("NVIDIA L4")
    user = override_peaks({"tflops": {"bf16": 100}})
    merged = user.merged_over(table)
    assert merged.flops("bfloat16") == Peak(100.0, "override")
    assert merged.bandwidth_gb_s == table.bandwidth_gb_s
    assert merged.flops("float32") == table.flops("float32")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"bandwidth_gb_s": -1}, "peaks.bandwidth_gb_s must be a positive number, got -1"),
        ({"tflops": {"bf16": float("nan")}}, "peaks.tflops.bf16 must be a positive number"),
        ({"tflops": {"int4": 3}}, "dtype must be one of"),
        ({"flops": 3}, "may only have the keys"),
        ({"tflops": [1]}, "must map dtype names"),
        (12, "must be a Peaks or a mapping"),
    ],
)
def test_bad_overrides_are_config_errors(value, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        override_peaks(value)
