"""StepSeries: steps.jsonl into columns; bad lines skipped and named; missing steps found."""

import json

import numpy as np
import pytest

from trainpace.series import StepSeries
from trainpace.steps_file import BLOCK_BYTES, read_steps


def record(step, **changes):
    base = {"step": step, "t_s": step * 0.1, "step_s": 0.1, "wait_s": 0.01, "exposed_wait_s": None,
            "h2d_s": None, "samples": 8, "tokens": None, "micro_batches": 1, "loss": 1.0 / step,
            "metric": None, "outside_s": 0.0, "loss_nonfinite": False}
    return {**base, **changes}


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_columns_are_the_records_with_nan_for_null(tmp_path):
    path = write(tmp_path / "steps.jsonl", [json.dumps(record(i)) for i in range(1, 6)])
    read = read_steps(path)
    s = read.series
    assert len(s) == 5 and read.bad_lines == [] and not read.truncated
    assert s.column("step").tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert s.column("loss")[1] == 0.5
    assert np.isnan(s.column("tokens")).all()
    assert np.isnan(s.column("tokens")).all() and not np.isnan(s.column("loss")).any()
    assert s.records() == [record(i) for i in range(1, 6)]
    assert s[-1] == record(5) and s[1:3] == [record(2), record(3)]
    with pytest.raises(IndexError):
        s[5]
    assert not s.column("step").flags.writeable


def test_a_wrong_typed_value_skips_that_line_and_names_it(tmp_path):
    lines = [json.dumps(record(i)) for i in range(1, 8)]
    lines[2] = json.dumps(record(3, step_s="slow"))
    lines[4] = "[1, 2]"
    lines[5] = json.dumps({"step": 6})
    read = read_steps(write(tmp_path / "steps.jsonl", lines))
    assert read.series.column("step").tolist() == [1.0, 2.0, 4.0, 7.0]
    assert read.bad_lines == [(3, 'step_s is "slow", not a number'), (5, "a JSON list, not an object"),
                              (6, "t_s is missing or null")]
    assert not read.truncated


def test_a_cut_off_last_line_is_truncation_and_a_bad_middle_line_is_not(tmp_path):
    lines = [json.dumps(record(i)) for i in range(1, 5)]
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join([*lines[:2], "not json", *lines[2:]]) + '\n{"step": 5, "t_', encoding="utf-8")
    read = read_steps(path)
    assert len(read.series) == 4
    assert read.truncated
    assert [n for n, _ in read.bad_lines] == [3]
    assert read.bad_lines[0][1].startswith("not a JSON line")


def test_blank_lines_and_extra_keys_are_fine(tmp_path):
    lines = [json.dumps({**record(1), "warmup": True, "new_key": [1]}), "", "  ", json.dumps(record(2))]
    read = read_steps(write(tmp_path / "steps.jsonl", lines))
    assert len(read.series) == 2 and read.bad_lines == []


def test_many_blocks_keep_line_numbers(tmp_path):
    n = 3 * BLOCK_BYTES // 200  # lines of ~200 bytes: three blocks or more
    lines = [json.dumps(record(i)) for i in range(1, n + 1)]
    lines[n - 10] = json.dumps(record(n - 9, wait_s={"a": 1}))
    read = read_steps(write(tmp_path / "steps.jsonl", lines))
    assert len(read.series) == n - 1
    assert read.bad_lines == [(n - 9, 'wait_s is {"a":1}, not a number')]
    assert read.series.missing_steps() == [(n - 9, n - 9)]


def test_missing_steps_are_ranges():
    s = StepSeries.from_records([record(i) for i in (3, 4, 5, 9, 10, 12)])
    assert s.missing_steps() == [(1, 2), (6, 8), (11, 11)]
    assert StepSeries().missing_steps() == []


def test_a_column_filled_late_keeps_earlier_nulls():
    s = StepSeries.from_records([record(1), record(2)])
    s.extend([record(3, tokens=64)])
    assert np.isnan(s.column("tokens")[:2]).all()
    assert s.column("tokens")[2] == 64
    assert s[0]["tokens"] is None and s[2]["tokens"] == 64


def test_a_column_of_one_value_costs_nothing_until_it_changes():
    s = StepSeries.from_records([record(i) for i in range(1, 1001)])
    # only step, t_s and loss vary; null columns and fixed ones (step_s, samples, ...) are free
    assert s.nbytes() == 8 * 1000 * 3
    assert s.column("samples").tolist() == [8.0] * 1000 and not s.column("samples").flags.writeable
    assert not np.isnan(s.column("samples")).any() and np.isnan(s.column("tokens")).all()
    s.extend([record(1001, samples=4, tokens=7)])
    assert s.nbytes() == 8 * 1001 * 5
    assert s.column("samples")[-2:].tolist() == [8.0, 4.0]
    assert s[999]["tokens"] is None and s[1000]["tokens"] == 7 and s[1000]["samples"] == 4


def test_extend_refuses_a_value_that_is_not_a_number():
    with pytest.raises(TypeError, match="step_s"):
        StepSeries.from_records([record(1, step_s="slow")])


def test_iteration_is_lazy_and_matches_indexing():
    s = StepSeries.from_records([record(i, tokens=i if i % 2 else None) for i in range(1, 9000)])
    it = iter(s)
    assert next(it) == s[0]
    assert list(s)[4500] == s[4500]


def test_room_reserved_is_filled_in_place_and_trimmed():
    s = StepSeries()
    s.reserve(10)
    s.extend([record(i) for i in range(1, 5)])
    assert s.nbytes() == 8 * 10 * 3  # the varying columns have their room already
    assert s.column("step").tolist() == [1.0, 2.0, 3.0, 4.0]
    s.extend([record(i, samples=4) for i in range(5, 14)])  # past the room: it grows
    assert s.column("step").tolist() == [float(i) for i in range(1, 14)]
    assert s.column("samples").tolist() == [8.0] * 4 + [4.0] * 9
    s.trim()
    assert s.nbytes() == 8 * 13 * 4
    assert s.records() == [record(i) for i in range(1, 5)] + [record(i, samples=4)
                                                             for i in range(5, 14)]


def test_the_reader_keeps_no_room_beyond_its_steps(tmp_path):
    lines = [json.dumps(record(i)) for i in range(1, 20_001)]
    read = read_steps(write(tmp_path / "steps.jsonl", lines))
    assert read.series.nbytes() == 8 * 20_000 * 3
    assert read.series.records()[-1] == record(20_000)


def test_missing_steps_of_a_long_increasing_run_across_chunks():
    from trainpace.series import CHUNK_STEPS

    steps = [*range(3, CHUNK_STEPS + 1), *range(CHUNK_STEPS + 4, 2 * CHUNK_STEPS + 10)]
    s = StepSeries.from_records({"step": i, "t_s": 1.0, "step_s": 1.0} for i in steps)
    assert s.missing_steps() == [(1, 2), (CHUNK_STEPS + 1, CHUNK_STEPS + 3)]
    # out of order or repeated: the sorted path gives the same ranges
    shuffled = StepSeries.from_records({"step": i, "t_s": 1.0, "step_s": 1.0}
                                       for i in [5, 3, 3, 9, 4, 12])
    assert shuffled.missing_steps() == [(1, 2), (6, 8), (10, 11)]
