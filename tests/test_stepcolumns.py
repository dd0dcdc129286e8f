"""Steps as columns: what a window hands to the column store and the window figures."""

import math
import random
from array import array

import pytest

from trainpace.measure.summarize import window_figures
from trainpace.records import STEP_FIELDS
from trainpace.series import StepSeries
from trainpace.stepcolumns import StepBatch, StepColumns, columns_of


def record(step, **values):
    out = dict.fromkeys(STEP_FIELDS)
    out.update(step=step, t_s=0.1 * step, step_s=0.1, wait_s=0.0, micro_batches=1)
    out.update(values)
    return out


def as_lists(columns):
    return {name: [None if math.isnan(v) else v for v in columns.column(name)]
            for name in STEP_FIELDS}


def test_columns_of_records_keep_every_value_and_null_as_nan():
    records = [record(1, samples=8, loss=2.5, loss_nonfinite=False),
               record(2, samples=8, loss=None, loss_nonfinite=True)]
    columns = columns_of(records)
    assert columns.n == 2
    assert list(columns.column("samples")) == [8.0, 8.0]
    assert list(columns.column("loss_nonfinite")) == [0.0, 1.0]
    assert columns.is_null("tokens") and not columns.is_null("loss")
    lists = as_lists(columns)
    assert lists["loss"] == [2.5, None]
    assert lists["step"] == [1.0, 2.0]


def test_a_value_that_is_not_a_number_is_named():
    with pytest.raises(TypeError, match="step_s"):
        columns_of([record(1, step_s="slow")])


def test_concat_keeps_the_order_and_one_value_fields_stay_one_value():
    a = StepColumns(2, {**dict.fromkeys(STEP_FIELDS, math.nan), "step": array("d", [1, 2]),
                        "samples": 8.0})
    b = StepColumns(1, {**dict.fromkeys(STEP_FIELDS, math.nan), "step": array("d", [3]),
                        "samples": 8.0})
    c = StepColumns(1, {**dict.fromkeys(STEP_FIELDS, math.nan), "step": array("d", [4]),
                        "samples": array("d", [5])})
    ab = StepColumns.concat([a, b])
    assert ab.n == 3 and ab.values["samples"] == 8.0 and list(ab.column("step")) == [1, 2, 3]
    abc = StepColumns.concat([a, StepColumns(0, dict.fromkeys(STEP_FIELDS, math.nan)), b, c])
    assert list(abc.column("samples")) == [8, 8, 8, 5]
    assert abc.is_null("tokens")


def test_a_series_appended_columns_equals_one_extended_with_the_records():
    rng = random.Random(3)
    records = [record(i, step_s=rng.random(), samples=rng.choice([8, None]),
                      loss=rng.choice([None, rng.random()])) for i in range(1, 300)]
    by_records = StepSeries.from_records(records)
    by_columns = StepSeries()
    for lo in range(0, len(records), 70):
        by_columns.append(columns_of(records[lo:lo + 70]))
    assert by_columns.records() == by_records.records()


def test_window_figures_from_columns_equal_those_from_records_to_the_last_bit():
    rng = random.Random(7)
    records = [record(i, t_s=0.01 * i, step_s=rng.random(), wait_s=rng.random() / 10,
                      samples=32, tokens=rng.randrange(100, 200), loss=rng.choice([None, rng.random()]),
                      loss_nonfinite=rng.choice([None, False, True]),
                      h2d_s=rng.choice([None, 0.001]), outside_s=rng.choice([None, 0.5]))
               for i in range(1, 120)]
    for warmup in (0, 5, 119, 200):
        from_columns = window_figures(columns_of(records), warmup)
        from_records = window_figures(records, warmup)
        assert from_columns == from_records
    figures = window_figures(records, 5)
    assert figures["measured_steps"] == 114 and figures["first_step"] == 1
    assert figures["tokens_per_s"] == sum(r["tokens"] for r in records[5:]) / sum(
        sorted(r["step_s"] for r in records[5:]))
    assert figures["loss_nonfinite_steps"] == sum(r["loss_nonfinite"] is True for r in records)
    kept = [r["loss"] for r in records if r["loss"] is not None]
    assert figures["loss"] == sum(kept) / len(kept)


def test_an_empty_window_has_no_figures():
    figures = window_figures(StepBatch.of([]).columns, 0)
    assert figures["steps"] == 0 and figures["first_step"] is None
    assert figures["samples_per_s"] is None and figures["t_s"] is None


def test_a_step_line_has_the_records_fields_in_file_order_and_encodes_the_same():
    import msgspec

    from trainpace.stepcolumns import StepLine

    assert StepLine.__struct_fields__ == STEP_FIELDS
    values = record(3, samples=8, loss=0.25, loss_nonfinite=False, outside_s=0.5)
    line = StepLine(*values.values())
    assert msgspec.json.encode(line) == msgspec.json.encode(values)
    batch = StepBatch([line], columns_of([values]))
    assert batch.records == [values] and batch.last_step() == 3 and len(batch) == 1
