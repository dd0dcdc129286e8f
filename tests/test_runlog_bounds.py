"""Every run-folder file read back is bounded: special files refused by name, sizes capped,
impossible values skipped and named (issue 26). Real FIFOs, devices and processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from report.folders import steps, write_run
from trainpace.errors import RunFolderError
from trainpace.inputs import JSON_MAX_BYTES
from trainpace.runlog import read_json, read_jsonl, read_run
from trainpace.steps_file import MAX_LINE_BYTES, read_steps
from trainpace.summary import Summary

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and /dev/zero: POSIX")


def _run(tmp_path: Path, n: int = 5) -> Path:
    return write_run(tmp_path / "run", steps(n, step_s=0.1, samples=8), summary=Summary())


@posix_only
@pytest.mark.parametrize("name", ["meta.json", "summary.json", "steps.jsonl", "system.jsonl"])
def test_a_fifo_in_the_run_folder_is_refused_by_name_without_blocking(tmp_path, name):
    run = _run(tmp_path)
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)  # no writer ever opens it: a blocking open would wait forever
    with pytest.raises(RunFolderError, match=rf"{name}: a FIFO \(named pipe\), not a regular"):
        read_run(run)


@posix_only
@pytest.mark.parametrize(("name", "device"), [("summary.json", "/dev/zero"),
                                              ("system.jsonl", "/dev/zero"),
                                              ("steps.jsonl", "/dev/zero"),
                                              ("steps.jsonl", "/dev/urandom")])
def test_a_link_to_an_endless_device_is_refused(tmp_path, name, device):
    run = _run(tmp_path)
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(device)
    with pytest.raises(RunFolderError, match=rf"{name}: a character device, not a regular"):
        read_run(run)


@posix_only
def test_report_and_compare_of_a_folder_with_a_fifo_exit_1_at_once(tmp_path):
    run = _run(tmp_path)
    (run / "steps.jsonl").unlink()
    os.mkfifo(run / "steps.jsonl")
    for argv in (["report", str(run)], ["compare", str(run), str(run)]):
        done = subprocess.run([sys.executable, "-c", "import sys; from trainpace.cli import main; sys.exit(main())", *argv], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        assert "steps.jsonl: a FIFO (named pipe), not a regular file" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_json_file_beyond_the_cap_is_refused_before_reading(tmp_path):
    path = tmp_path / "summary.json"
    with open(path, "wb") as fh:
        fh.truncate(JSON_MAX_BYTES + 1)  # sparse: its size says enough
    with pytest.raises(RunFolderError, match=r"summary\.json: 8,388,609 bytes, more than"):
        read_json(path)


def test_deep_nesting_nan_and_overflow_in_json(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RunFolderError, match="nested too deeply"):
        read_json(path)
    path.write_text('{"a": NaN, "b": 1e400, "c": -Infinity, "d": 2.5}')
    assert read_json(path) == {"a": None, "b": None, "c": None, "d": 2.5}
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')  # a byte-order mark: read past
    assert read_json(path) == {"a": 1}


def test_a_long_line_in_steps_costs_linear_time_and_is_skipped_by_name(tmp_path):
    path = tmp_path / "steps.jsonl"
    good = b'{"step": 1, "t_s": 0.1, "step_s": 0.1}\n'
    with open(path, "wb") as fh:
        fh.write(good)
        fh.write(b'{"step": 2, "x": "' + b"a" * (64 << 20) + b'"}\n')  # 64 MB, one line
        fh.write(b'{"step": 3, "t_s": 0.3, "step_s": 0.1}\n')
    # 64 MB of one line is 64 blocks; quadratic re-joining copied ~2 GB of it
    read = read_steps(path)
    assert read.series.column("step").tolist() == [1.0, 3.0]
    assert read.bad_lines == [(2, f"longer than {MAX_LINE_BYTES:,} bytes")]


def test_a_long_line_without_end_at_the_end_of_the_file(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_bytes(b'{"step": 1, "t_s": 0.1, "step_s": 0.1}\n' + b" " * (3 * MAX_LINE_BYTES))
    read = read_steps(path)
    assert len(read.series) == 1
    assert read.bad_lines == [(2, f"longer than {MAX_LINE_BYTES:,} bytes")]


def test_system_jsonl_line_beyond_the_cap_is_an_error_naming_it(tmp_path):
    path = tmp_path / "system.jsonl"
    path.write_bytes(b'{"t_s": 1}\n' + b"x" * (MAX_LINE_BYTES + 10))
    with pytest.raises(RunFolderError, match=r"system\.jsonl:2: a line longer than"):
        read_jsonl(path)


@pytest.mark.parametrize(("line", "why"), [
    ('{"step": 2, "t_s": 0.2, "step_s": -5}', "step_s -5 is not a duration"),
    ('{"step": 2, "t_s": 0.2, "step_s": 1e308}', "step_s 1e+308"),
    ('{"step": 2, "t_s": -1, "step_s": 0.1}', "t_s -1"),
    ('{"step": 1000000000000000000000000000000, "t_s": 0.2, "step_s": 0.1}', "step 1e+30 is not a whole"),
    ('{"step": 2.5, "t_s": 0.2, "step_s": 0.1}', "step 2.5"),
    ('{"step": 0, "t_s": 0.2, "step_s": 0.1}', "step 0"),
])
def test_impossible_step_values_are_skipped_and_named(tmp_path, line, why):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1, "t_s": 0.1, "step_s": 0.1}\n' + line + "\n"
                    '{"step": 3, "t_s": 0.3, "step_s": 0.1}\n')
    read = read_steps(path)
    assert read.series.column("step").tolist() == [1.0, 3.0]
    assert [n for n, _ in read.bad_lines] == [2]
    assert read.bad_lines[0][1].startswith(why), read.bad_lines


def test_a_step_numbered_ten_to_the_thirty_does_not_make_a_missing_range(tmp_path):
    run = write_run(tmp_path / "run", steps(3, step_s=0.1, samples=8))
    with open(run / "steps.jsonl", "a") as fh:
        fh.write('{"step": 1e30, "t_s": 0.4, "step_s": 0.1}\n')
    folder = read_run(run)
    assert folder.missing_steps == []
    assert len(folder.notes) == 1 and "skipped a line that is not a step record" in folder.notes[0]


def test_repeated_step_numbers_keep_the_first_record_and_are_named(tmp_path):
    run = write_run(tmp_path / "run", steps(4, step_s=0.1, samples=8))
    with open(run / "steps.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 3, "t_s": 0.5, "step_s": 0.3}) + "\n")
        fh.write(json.dumps({"step": 4, "t_s": 0.8, "step_s": 0.3}) + "\n")
    folder = read_run(run)
    assert folder.series.column("step").tolist() == [1.0, 2.0, 3.0, 4.0]
    assert folder.series.column("step_s").tolist() == [0.1] * 4  # the first of each kept
    assert any("step numbers written more than once: 3, 4; the first record of each is kept"
               in note for note in folder.notes)


def test_a_byte_order_mark_is_not_a_missing_step(tmp_path):
    run = write_run(tmp_path / "run", steps(3, step_s=0.1, samples=8))
    path = run / "steps.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    folder = read_run(run)
    assert len(folder.series) == 3
    assert folder.notes == [] and folder.missing_steps == []


@pytest.mark.parametrize(("section", "key", "value", "message"), [
    ("steps", "total", "12", "steps.total is '12', expected an integer"),
    ("time", "wall_s", "fast", "time.wall_s is 'fast', expected a number or null"),
    ("steps", "total", 10**30, "steps.total is 1000000000000000000000000000000"),
])
def test_summary_values_of_the_wrong_type_are_named(tmp_path, section, key, value, message):
    run = _run(tmp_path)
    data = Summary().to_dict()
    data[section][key] = value
    (run / "summary.json").write_text(json.dumps(data))
    with pytest.raises(RunFolderError, match=message):
        read_run(run)


def test_summary_nan_and_overflow_are_unknown(tmp_path):
    run = _run(tmp_path)
    text = json.dumps(Summary().to_dict()).replace('"samples_per_s": null', '"samples_per_s": NaN')
    text = text.replace('"wall_s": null', '"wall_s": 1e400')
    (run / "summary.json").write_text(text)
    summary = read_run(run).summary
    assert summary is not None
    assert summary.throughput.samples_per_s is None and summary.time.wall_s is None


def test_a_summary_older_than_its_steps_is_behind_even_with_as_many_steps(tmp_path, capsys):
    from trainpace.cli import main

    run = write_run(tmp_path / "run", steps(10, step_s=0.1, samples=8))
    stale = Summary(run_id="run").to_dict()
    stale["steps"] = {"total": 10, "warmup": 0, "measured": 10}
    stale["time"]["wall_s"] = 99.0  # from another run: not these steps' figure
    (run / "summary.json").write_text(json.dumps(stale))
    written = (run / "steps.jsonl").stat().st_mtime
    os.utime(run / "summary.json", (written - 60, written - 60))
    assert read_run(run).summary_behind
    assert main(["report", str(run), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["time"]["wall_s"] != 99.0
    assert "summary.json is missing or behind; the figures are recomputed from 10 steps" in (
        captured.err)


def test_summary_items_of_lists_and_objects_are_checked_too(tmp_path):
    run = _run(tmp_path)
    data = Summary().to_dict()
    data["device"]["throttle_reasons"] = {"sw_power_cap": "often"}
    (run / "summary.json").write_text(json.dumps(data))
    with pytest.raises(RunFolderError,
                       match=r"device\.throttle_reasons\.sw_power_cap is 'often', expected a number"):
        read_run(run)
