import pytest

from trainpace.units import format_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.00085, "850 µs"), (0.0123, "12.3 ms"), (0.5, "500 ms"), (1.2, "1.2 s"), (59.94, "59.9 s"),
     (300.0, "5m00s"), (7199.0, "119m59s"), (7500.0, "2h05m")],
)
def test_durations_read_naturally(seconds, text):
    assert format_duration(seconds) == text
