"""Energy over the measured steps from sampler rows: counters, resets, power, brackets."""

from trainpace.measure.energy import NVML_COUNTER, energy_between


def _gpu_rows(points, index=0):
    return [{"t_s": t, "gpus": [{"index": index, "energy_mj": e, "power_w": None}]}
            for t, e in points]


def test_readings_that_bracket_the_span_are_used():
    rows = _gpu_rows([(0.0, 0), (1.0, 100_000), (2.0, 200_000), (3.0, 300_000), (4.0, 400_000)])
    reading = energy_between(rows, 1.5, 2.5)  # bracketed by the readings at 1 s and 3 s
    assert reading.span_s == 2.0
    assert reading.power_w_mean == 100.0


def test_a_counter_that_resets_counts_the_energy_since_the_reset():
    rows = _gpu_rows([(0.0, 1_000_000), (1.0, 1_200_000), (2.0, 50_000), (3.0, 250_000)])
    reading = energy_between(rows, 0.0, 3.0)
    assert reading.source == NVML_COUNTER
    assert reading.resets == 1
    # 200 J + 50 J (since the reset) + 200 J over 3 s
    assert reading.power_w_mean == 150.0


def test_two_gpus_add_up():
    rows = [{"t_s": t, "gpus": [{"index": 0, "energy_mj": 100_000 * t},
                                {"index": 1, "energy_mj": 300_000 * t}]} for t in (0.0, 1.0, 2.0)]
    reading = energy_between(rows, 0.0, 2.0)
    assert reading.devices == 2
    assert reading.power_w_mean == 400.0


def test_no_source_is_null_naming_what_was_looked_for():
    rows = [{"t_s": 0.0, "gpus": [], "host": {}}, {"t_s": 1.0, "gpus": [], "host": {}}]
    reading = energy_between(rows, 0.0, 1.0)
    assert reading.power_w_mean is None
    assert reading.energy_j(10.0) is None
    assert "NVML" in reading.missing and "RAPL" in reading.missing


def test_one_reading_is_not_enough():
    reading = energy_between(_gpu_rows([(0.0, 5)]), 0.0, 1.0)  # a source, one reading
    assert reading.power_w_mean is None
    assert "fewer than two" in reading.missing
