"""The public API is exactly ``__all__``, each name is importable, and the heavy parts load lazily."""

import subprocess
import sys

import pytest

import trainpace


def test_public_api_is_exactly_all():
    public = {name for name in dir(trainpace) if not name.startswith("_")}
    # subpackages show up as attributes once imported; they are not the API
    modules = {name for name in public if type(getattr(trainpace, name)).__name__ == "module"}
    assert public - modules == set(trainpace.__all__) - {"__version__"}


# what the Python API page (docs/reference/api.md) lists
DOCUMENTED_API = ["Meter", "read_run", "compare_runs", "diagnose", "threshold_table",
                  "analyze_traces", "Summary", "StepSeries", "RunData", "Comparison", "Thresholds",
                  "TraceAnalysis", "tune_loader"]


@pytest.mark.parametrize("name", DOCUMENTED_API)
def test_the_documented_api_is_exported(name):
    assert name in trainpace.__all__
    assert getattr(trainpace, name) is not None


def test_each_name_is_the_object_its_module_defines():
    from trainpace.comparison import compare_runs
    from trainpace.diagnosis import diagnose, threshold_table
    from trainpace.runlog import read_run
    from trainpace.trace import analyze_traces

    assert trainpace.compare_runs is compare_runs
    assert trainpace.read_run is read_run
    assert trainpace.threshold_table is threshold_table
    assert trainpace.analyze_traces is analyze_traces
    # the function and the subpackage that defines it have different names: importing
    # trainpace.diagnosis (done above) leaves trainpace.diagnose the function
    assert trainpace.diagnose is diagnose
    assert callable(trainpace.diagnose)
    from trainpace import diagnose as imported

    assert imported is diagnose


def test_the_package_is_a_plain_module():
    # no class swapped in to keep a name: the public names are plain attributes
    import types

    assert type(trainpace) is types.ModuleType


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        trainpace.nope  # noqa: B018


def test_import_trainpace_loads_neither_torch_nor_the_analysis():
    code = ("import sys, trainpace; "
            "print(sorted(m for m in ('torch', 'trainpace.meter', 'trainpace.diagnosis', "
            "'trainpace.trace', 'trainpace.comparison', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
