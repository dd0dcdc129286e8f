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
