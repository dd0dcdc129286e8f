import pytest

from trainpace.units import format_duration, format_number, number_or_none


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.00085, "850 µs"), (0.0123, "12.3 ms"), (0.5, "500 ms"), (1.2, "1.2 s"), (59.94, "59.9 s"),
     (300.0, "5m00s"), (7199.0, "119m59s"), (7500.0, "2h05m")],
)
def test_durations_read_naturally(seconds, text):
    assert format_duration(seconds) == text


def test_numbers_read_with_units_and_unknown_is_a_dash():
    assert format_number(1234.5, "samples/s") == "1,234 samples/s"  # banker's rounding of .5
    assert format_number(0.25) == "0.25"
    assert format_number(None, "GB/s") == "—"


@pytest.mark.parametrize(("value", "number"),
                         [(3, 3.0), (2.5, 2.5), (True, None), ("1", None), (None, None),
                          (float("nan"), None), (float("inf"), None)])
def test_number_or_none_takes_finite_numbers_only(value, number):
    assert number_or_none(value) == number


def test_byte_sizes_read_with_three_digits() -> None:
    from trainpace.units import format_bytes

    assert [format_bytes(n) for n in (512, 1_500, 67_108_864, 2_147_483_648, 1e9)] == [
        "512 B", "1.5 kB", "67.1 MB", "2.15 GB", "1 GB"]


def test_unknown_is_spelled_once() -> None:
    # every output says "unknown" as units.UNKNOWN does; no module writes another dash
    import ast
    from pathlib import Path

    import trainpace
    from trainpace.units import UNKNOWN, format_number, format_seconds

    assert format_number(None) == format_seconds(None) == format_seconds(float("nan")) == UNKNOWN
    root = Path(trainpace.__file__).parent
    own = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "units.py" and path.parent == root:
            continue
        tree = ast.parse(path.read_text())
        in_text = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                   for part in node.values}  # a dash inside a sentence ("steps 3–9") is prose
        own.extend(f"{path.relative_to(root)}:{node.lineno} {node.value!r}"
                   for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and node.value == "–"
                   and id(node) not in in_text)
    assert own == []


def test_compact_counts() -> None:
    from trainpace.units import format_compact

    assert [format_compact(v) for v in (0.25, 12.0, 999.0, 3400.0, 45_612.0, 1.2e6, 2e9, -5e3)] \
        == ["0.25", "12", "999", "3.4k", "45.6k", "1.2M", "2G", "-5k"]
