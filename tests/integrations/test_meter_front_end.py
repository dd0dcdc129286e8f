"""The front-ends (``trainpace run``, the integrations) reach a Meter only through what it
names for them, never through the parts inside it (its recorder, loop, ledger, guards)."""

import ast
from pathlib import Path

import trainpace
from trainpace.meter.facade import Meter

SRC = Path(__file__).resolve().parents[2] / "src" / "trainpace"
FRONT_ENDS = [SRC / "integrations", SRC / "cli"]
# The Meter's methods for the front-ends that drive it (not the loop's API, so underscored).
FOR_FRONT_ENDS = {"_job_ledger", "_take_back", "_leave_signals", "_hurry", "_end_as"}


def _meter_privates_used() -> dict[str, list[str]]:
    """Private attributes read on anything called ``meter`` (``meter._x``, ``self.meter._x``),
    with where."""
    used: dict[str, list[str]] = {}
    for folder in FRONT_ENDS:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                        and not node.attr.startswith("__")):
                    continue
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if name == "meter":
                    used.setdefault(node.attr, []).append(f"{path.relative_to(SRC)}:{node.lineno}")
    return used


def test_front_ends_use_only_the_methods_the_meter_names_for_them():
    used = _meter_privates_used()
    assert {"_job_ledger", "_take_back", "_leave_signals", "_hurry"} <= set(used)  # seen at all
    assert {name: where for name, where in used.items() if name not in FOR_FRONT_ENDS} == {}


def test_the_methods_for_front_ends_are_the_meters_own_and_not_public():
    for name in FOR_FRONT_ENDS:
        assert name in vars(Meter), name
    assert not {name.lstrip("_") for name in FOR_FRONT_ENDS} & set(dir(Meter))
    assert "Meter" in trainpace.__all__


def test_the_job_ledger_is_the_run_folders_and_none_without_one(tmp_path, clock):
    with_folder = trainpace.Meter(tmp_path / "run", console=False, report=False, clock=clock)
    without = trainpace.Meter(None, console=False, report=False, clock=clock)
    try:
        assert with_folder._job_ledger is not None
        assert with_folder._job_ledger.folder == with_folder.path
        assert without._job_ledger is None
    finally:
        with_folder.finish()
        without.finish()
