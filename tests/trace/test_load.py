from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np
import pytest
from tracekit import HANDMADE, KEYS_AFTER, RESNET_NW0, SAMPLED, handmade

from trainpace.errors import TraceFormatError
from trainpace.trace import stream
from trainpace.trace.load import load_trace, trace_files
from trainpace.trace.memory import json_bytes, memory_needed

WriteTrace = Callable[..., Path]


def _names(cols) -> list[str]:  # type: ignore[no-untyped-def]
    return [cols.names[i] for i in cols.name]


def test_handmade_trace_becomes_columns() -> None:
    cols = load_trace(HANDMADE)
    assert len(cols) == 23  # the complete ("X") events with a cat
    assert cols.events_total == 27
    assert cols.skipped == {"other phases (not 'X')": 4}
    assert cols.meta["distributedInfo"]["rank"] == 0
    assert cols.meta["traceName"] == "handmade_steps.json"  # a key after traceEvents
    assert not cols.rounded_to_us
    first_kernel = _names(cols).index("volta_sgemm_128x64_nn")
    assert cols.ts[first_kernel] == 30 and cols.end[first_kernel] == 50
    assert cols.stream[first_kernel] == 7 and cols.correlation[first_kernel] == 11
    assert cols.external_id[first_kernel] == 1 and cols.device[first_kernel] == 0
    step = _names(cols).index("ProfilerStep#1")
    assert cols.stream[step] == -1 and cols.correlation[step] == -1


@pytest.mark.parametrize("chunk", [64, 200, 1 << 20])
def test_piece_size_does_not_change_the_columns(chunk: int) -> None:
    whole = load_trace(HANDMADE)
    pieces = load_trace(HANDMADE, chunk_bytes=chunk)
    assert _names(pieces) == _names(whole)
    for column in ("ts", "dur", "stream", "correlation", "external_id"):
        assert np.array_equal(getattr(pieces, column), getattr(whole, column))


@pytest.mark.parametrize("chunk", [64, 100, 200, 1000, 1 << 20])
@pytest.mark.parametrize("compress", [False, True])
def test_keys_after_the_events_are_read_as_the_stdlib_reads_them(
        write_trace: WriteTrace, chunk: int, compress: bool) -> None:
    # deviceProperties after the events: its "}]" is a cut point past the end of the array
    data = KEYS_AFTER.read_bytes()
    path = write_trace(gzip.compress(data) if compress else data, "after.json.gz")
    cols = load_trace(path, chunk_bytes=chunk)
    whole = load_trace(HANDMADE)
    assert _names(cols) == _names(whole) and cols.skipped == whole.skipped
    for column in ("ts", "dur", "stream", "correlation", "external_id", "device"):
        assert np.array_equal(getattr(cols, column), getattr(whole, column))
    expected = json.loads(data)
    del expected["traceEvents"]
    assert cols.meta == expected
    assert cols.meta["deviceProperties"][0]["name"] == "Handmade GPU"


def test_array_closing_inside_a_piece_with_a_non_ascii_name(write_trace: WriteTrace) -> None:
    trace = json.loads(KEYS_AFTER.read_text())
    trace["traceEvents"][-1]["name"] = "Profilér ✓ (0)"  # bytes and characters differ
    trace["extra"] = [{"a": "}, ]"}, {"b": [{}]}]
    cols = load_trace(write_trace(json.dumps(trace, ensure_ascii=False).encode()))
    assert len(cols) == 23 and cols.meta["extra"] == trace["extra"]
    assert "Profilér ✓ (0)" in cols.names


def test_orjson_path_gives_the_same_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = load_trace(SAMPLED[1])

    class Refuses:
        def decode(self, data: bytes) -> None:
            raise msgspec.DecodeError("refused")

    monkeypatch.setattr(stream, "_DECODER", Refuses())
    slow = load_trace(SAMPLED[1])
    assert _names(slow) == _names(fast) and slow.skipped == fast.skipped
    for column in ("ts", "dur", "stream", "correlation", "external_id", "device"):
        assert np.array_equal(getattr(slow, column), getattr(fast, column))


@pytest.mark.parametrize("odd", [
    None,  # every phase known, "ph" first: decoded by phase
    {"cat": "cpu_op", "name": "late ph", "ts": 5, "dur": 1, "ph": "X"},  # "ph" last
    {"ph": "G", "cat": "cpu_op", "name": "unknown phase", "ts": 5, "dur": 1},
    {"cat": "cpu_op", "name": "no phase", "ts": 5, "dur": 1},
    {"ph": 7, "cat": "cpu_op", "name": "phase not a string", "ts": 5, "dur": 1},
])
def test_events_typed_by_phase_read_as_the_careful_path_reads_them(
        write_trace: WriteTrace, monkeypatch: pytest.MonkeyPatch,
        odd: dict[str, object] | None) -> None:
    trace = handmade()
    trace["traceEvents"] += [{"ph": ph, "name": f"phase {ph}", "cat": "c", "ts": 1, "id": 3}
                             for ph in stream.OTHER_PHASES]
    if odd is not None:
        trace["traceEvents"].insert(3, odd)
    path = write_trace(trace)
    typed = load_trace(path)

    class Refuses:
        def decode(self, data: bytes) -> None:
            raise msgspec.DecodeError("refused")

    monkeypatch.setattr(stream, "_DECODER", Refuses())
    careful = load_trace(path)
    assert _names(typed) == _names(careful) and typed.skipped == careful.skipped
    assert typed.events_total == careful.events_total == len(trace["traceEvents"])
    assert typed.skipped["other phases (not 'X')"] == 4 + len(stream.OTHER_PHASES) + (
        odd is not None and odd.get("ph") != "X")
    for column in ("ts", "dur", "stream", "correlation", "external_id", "device", "thread"):
        assert np.array_equal(getattr(typed, column), getattr(careful, column))
    assert ("late ph" in typed.names) == (odd is not None and odd["name"] == "late ph")


def test_real_gzip_trace_matches_a_plain_parse() -> None:
    cols = load_trace(SAMPLED[0], chunk_bytes=1 << 16)
    events = json.loads(gzip.decompress(SAMPLED[0].read_bytes()))["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X" and "cat" in e]
    assert len(cols) == len(complete) == 4811
    assert _names(cols) == [e["name"] for e in complete]
    assert cols.ts.tolist() == [float(e["ts"]) for e in complete]
    assert cols.meta["distributedInfo"] == {"backend": "nccl", "rank": 0, "world_size": 128}


def test_names_holding_cut_points_survive_small_pieces(write_trace: WriteTrace) -> None:
    trace = handmade()
    tricky = 'weird}, {"name": "x"}], ["}'
    trace["traceEvents"][6]["name"] = tricky
    trace["traceEvents"][6]["args"]["nested"] = [{"a": 1}, {"b": {"c": "}, {"}}]
    cols = load_trace(write_trace(trace), chunk_bytes=64)
    assert tricky in cols.names and len(cols) == 23


def test_a_cut_inside_a_string_is_retried_without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    # orjson would build most of such a piece as dicts before failing at its end
    from trainpace.trace.extract import EventColumns
    from trainpace.trace.load import finish_columns

    trace = handmade()
    for event in trace["traceEvents"]:
        if isinstance(event.get("name"), str):
            event["name"] += '}, {"x": "'  # a cut point inside every name
    data = json.dumps(trace).encode()

    class Blocks:  # the file in 40-byte blocks: pieces end wherever a block does
        def __init__(self) -> None:
            self.at = 0

        def read(self, size: int) -> bytes:
            self.at += 40
            return data[self.at - 40:self.at]

    def columns() -> list[str]:
        sink = EventColumns()
        stream.Stream(Blocks(), "t.json", 64, sink).run()  # type: ignore[arg-type]
        return _names(finish_columns("t.json", {}, sink))

    expected = columns()
    pieces: list[bytes] = []
    real = stream.orjson

    class Watched:
        JSONDecodeError = real.JSONDecodeError

        @staticmethod
        def loads(text: bytes | bytearray | memoryview) -> object:
            if bytes(text[:1]) == b"[":
                pieces.append(bytes(text))
            return real.loads(text)

    monkeypatch.setattr(stream, "orjson", Watched)
    assert columns() == expected and len(expected) == 23
    assert pieces == []


def test_ns_resolution_is_rounded_as_hta_does(write_trace: WriteTrace) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 10.4, "dur": 5.2, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 20.5, "dur": 0.3, "args": {"stream": 7}},
    ]
    cols = load_trace(write_trace({"traceEvents": events}))
    assert cols.rounded_to_us
    assert cols.ts.tolist() == [11.0, 21.0]
    assert cols.end.tolist() == [15.0, 21.0]  # floor(15.6); floor(20.8) clamped to the start
    assert cols.dur.tolist() == [4.0, 0.0]


def test_json_array_format_and_bom(write_trace: WriteTrace) -> None:
    events = handmade()["traceEvents"]
    cols = load_trace(write_trace(b"\xef\xbb\xbf" + json.dumps(events).encode()))
    assert len(cols) == 23 and cols.meta == {}


def test_traceevents_key_nested_before_the_real_one(write_trace: WriteTrace) -> None:
    trace = {"note": {"traceEvents": "not this one"}, **handmade()}
    cols = load_trace(write_trace(trace))
    assert len(cols) == 23 and cols.meta["note"] == {"traceEvents": "not this one"}


def test_malformed_events_are_counted_and_skipped(write_trace: WriteTrace) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "ok", "ts": 1, "dur": 2, "args": {"stream": "7"}},
        {"ph": "X", "cat": "kernel", "name": "no dur", "ts": 1},
        {"ph": "X", "cat": "kernel", "name": "bad ts", "ts": "soon", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "negative", "ts": 1, "dur": -3},
        {"ph": "X", "cat": "kernel", "name": 5, "ts": 1, "dur": 1},
        {"ph": "X", "name": "no cat", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "args", "ts": 1, "dur": 1, "args": [1]},
        "not an event",
        {"ph": "X", "cat": "kernel", "name": "big", "ts": 1, "dur": 1,
         "args": {"correlation": 10**30, "stream": 1.5}},
    ]
    cols = load_trace(write_trace({"traceEvents": events}))
    assert _names(cols) == ["ok", "args", "big"]
    assert cols.stream.tolist() == [7, -1, 1]  # HTA reads a stream as int(...)
    assert cols.correlation.tolist() == [-1, -1, -1]
    assert cols.skipped == {
        "malformed: ts or dur missing or not a number": 2,
        "malformed: name or cat missing or not a string": 1,
        "no cat (HTA drops these too)": 1,
        "not a JSON object": 1,
        "malformed: ts or dur negative, infinite or out of range": 1,
    }


def _error(path: Path, **kwargs: object) -> str:
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert str(path) in message  # every error names the file
    return message


def test_truncated_gzip(write_trace: WriteTrace) -> None:
    data = gzip.compress(HANDMADE.read_bytes())
    message = _error(write_trace(data[: len(data) // 2], "cut.json.gz"))
    assert "damaged or truncated" in message


def test_corrupted_gzip(write_trace: WriteTrace) -> None:
    data = bytearray(gzip.compress(HANDMADE.read_bytes()))
    data[len(data) // 2] ^= 0xFF
    data[len(data) // 2 + 1] ^= 0xFF
    message = _error(write_trace(bytes(data), "bad.json.gz"))
    assert "gzip stream is damaged" in message or "not valid JSON" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "the file is empty"),
        (b"   \n ", "the file is empty"),
        (b"hello, world", "not JSON"),
        (b'{"schemaVersion": 1}', "no 'traceEvents' key (keys: schemaVersion)"),
        (b'{"traceEvents": 5}', "'traceEvents' is a int, not a list"),
        (b'"a string"', "not JSON"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "name": "a", "ts": 1, "dur": 1},',
         "truncated"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "name": "a", "ts": 1, "dur": 1}]',
         "without its closing"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "name": "a", "ts": 1 "dur": 1}, {}]}',
         "not valid JSON at byte 62"),
        (b'{"traceEvents": []} trailing', "unexpected data after traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "name": "a", "ts": 1, "dur": 1}], '
         b'"deviceProperties": [{"id": 0}] oops}', "not valid JSON after traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "name": "\xff", "ts": 1, "dur": 1}]}',
         "not valid JSON after byte 16"),
    ],
)
def test_bad_input_is_one_clear_error(write_trace: WriteTrace, content: bytes,
                                      expected: str) -> None:
    assert expected in _error(write_trace(content))


def test_file_ending_after_the_key_with_small_pieces(write_trace: WriteTrace) -> None:
    path = write_trace(b'{"pad": "' + b"x" * 200 + b'", "traceEvents"')
    assert "not valid JSON" in _error(path, chunk_bytes=64)


def test_missing_file_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        trace_files([tmp_path / "nope.json"])
    with pytest.raises(TraceFormatError, match="no trace files"):
        trace_files([tmp_path])


def test_folder_expands_to_its_traces(tmp_path: Path) -> None:
    for name in ("b.json", "a.pt.trace.json.gz", "notes.txt"):
        (tmp_path / name).write_text("{}")
    assert trace_files([tmp_path]) == [str(tmp_path / "a.pt.trace.json.gz"),
                                       str(tmp_path / "b.json")]


def test_trace_larger_than_memory_is_refused_before_reading() -> None:
    message = _error(RESNET_NW0, memory_available=10_000_000)
    assert "too large for the memory available" in message
    assert "its 35.2 MB of JSON need about" in message and "10 MB is free" in message


def test_json_size_of_gzip_comes_from_its_trailer() -> None:
    assert json_bytes(str(RESNET_NW0)) == 35154637
    assert json_bytes(str(HANDMADE)) == HANDMADE.stat().st_size
    assert memory_needed(str(RESNET_NW0)) > 35154637 // 2


def test_typed_path_skips_each_event_for_its_first_fault(write_trace: WriteTrace) -> None:
    # every event types cleanly, so msgspec's path (a pass per field) decides all of them
    events = [
        {"ph": "i", "cat": "instant", "name": "mark", "ts": 1},
        {"ph": "X", "name": "no cat", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": None, "ts": 1, "dur": 1},
        {"ph": "X", "cat": None, "name": None, "ts": 1},
        {"ph": "X", "cat": "kernel", "name": "no ts", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "new id", "ts": 3, "dur": 2,
         "args": {"External id": 8, "external id": 9, "device": 1, "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "old id", "ts": 5.0, "dur": 1,
         "args": {"external id": 9, "correlation": 4}},
    ]
    cols = load_trace(write_trace({"traceEvents": events}))
    assert _names(cols) == ["new id", "old id"]
    assert cols.external_id.tolist() == [8, 9] and cols.correlation.tolist() == [-1, 4]
    assert cols.device.tolist() == [1, -1] and cols.stream.tolist() == [7, -1]
    assert cols.ts.tolist() == [3.0, 5.0] and cols.end.tolist() == [5.0, 6.0]
    assert not cols.rounded_to_us  # 5.0 is a whole µs: nothing to round
    assert cols.events_total == 7
    assert cols.skipped == {
        "other phases (not 'X')": 1,
        "no cat (HTA drops these too)": 2,
        "malformed: name or cat missing or not a string": 1,
        "malformed: ts or dur missing or not a number": 1,
    }


def test_absurd_times_are_malformed_and_skipped(write_trace: WriteTrace) -> None:
    # 1e308 is a finite float: kept, it overflowed ts + dur (a numpy warning, which the
    # suite turns into an error) and gave a 300-digit launch median
    trace = handmade()
    good = load_trace(write_trace(trace, "good.json"))
    absurd = [
        {"ph": "X", "cat": "kernel", "name": "huge ts", "ts": 1e308, "dur": 1,
         "args": {"stream": 7, "correlation": 11}},
        {"ph": "X", "cat": "kernel", "name": "huge dur", "ts": 30, "dur": 1e308,
         "args": {"stream": 7, "correlation": 12}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": -1e300, "dur": 5,
         "args": {"correlation": 13}},
        {"ph": "X", "cat": "cpu_op", "name": "a day too long", "ts": 1, "dur": 1.1e12},
    ]
    trace["traceEvents"].extend(absurd)
    cols = load_trace(write_trace(trace, "absurd.json"))
    assert _names(cols) == _names(good)
    assert cols.skipped == {**good.skipped,
                            "malformed: ts or dur negative, infinite or out of range": 4}


def test_a_fifo_is_read_once(tmp_path: Path) -> None:
    import os
    import threading

    data = gzip.compress(HANDMADE.read_bytes())
    fifo = tmp_path / "trace.json.gz"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(load_trace(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "reading the FIFO hung"
    writer.join(timeout=5)
    assert result and _names(result[0]) == _names(load_trace(HANDMADE))


def test_gzip_in_several_members_and_zero_padding(write_trace: WriteTrace) -> None:
    # gzip allows members back to back and zero bytes after the last (gzip.open reads both)
    data = HANDMADE.read_bytes()
    cut = len(data) // 3
    packed = gzip.compress(data[:cut]) + gzip.compress(data[cut:]) + b"\0" * 7
    cols = load_trace(write_trace(packed, "members.json.gz"))
    assert _names(cols) == _names(load_trace(HANDMADE))
    assert "damaged or truncated" in _error(write_trace(packed[:-20], "cut.json.gz"))


def test_the_ids_are_read_in_the_order_of_the_args_struct() -> None:
    # the columns take each event's ids as msgspec.structs.astuple of its args: in field order
    from trainpace.trace import extract

    assert tuple(f.name for f in msgspec.structs.fields(stream.EventArgs)) == extract.ID_FIELDS


def test_an_id_beyond_64_bits_is_minus_one_and_its_piece_counted_once(
        write_trace: WriteTrace) -> None:
    # the piece goes the careful way; its events and phases were counted twice before
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "tid": 1,
         "args": {"correlation": 2**70, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 5, "dur": 2, "tid": 1,
         "args": {"correlation": 3}},
        {"ph": "i", "name": "mark", "ts": 1},
    ]
    cols = load_trace(write_trace(json.dumps({"traceEvents": events}).encode()))
    assert cols.events_total == 3
    assert cols.skipped == {"other phases (not 'X')": 1}
    assert cols.correlation.tolist() == [-1, 3] and cols.stream.tolist() == [7, -1]
    assert cols.names == ("k", "k2")


@pytest.mark.parametrize("where", ["before", "after"])
def test_keys_around_the_events_keep_an_integer_beyond_64_bits(
        write_trace: WriteTrace, where: str) -> None:
    # found by the fuzz test: orjson read -9223372036854775809 as a float; json.loads does not
    event = {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1}
    big = {"big": -(2**63) - 1}
    doc = {**big, "traceEvents": [event]} if where == "before" else {"traceEvents": [event], **big}
    cols = load_trace(write_trace(json.dumps(doc).encode()))
    assert cols.meta == big and type(cols.meta["big"]) is int


@pytest.mark.parametrize("given", ["", ".", "./", "a", "a/", "a//b", "./a/./b/.", "a/../b",
                                   "/", "//", "///", "//a", "///a/", "/a/./.."])
def test_trace_paths_are_spelled_as_pathlib_spells_them(given: str) -> None:
    # trace_files spells paths without pathlib (9 ms to import), exactly as str(Path(p)) does
    from trainpace.trace.load import _path_str

    assert _path_str(given) == str(Path(given))


def test_a_folder_lists_its_traces_as_pathlib_joins_them(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.json").write_text("{}")
    (tmp_path / "d.json").mkdir()  # a folder named like a trace is not one
    monkeypatch.chdir(tmp_path)
    assert trace_files(["."]) == trace_files(["./"]) == ["t.json"]
    assert trace_files([f"{tmp_path}//"]) == [str(tmp_path / "t.json")]


def test_a_run_folder_stands_for_the_traces_its_meter_recorded(tmp_path: Path) -> None:
    # `trainpace analyze runs/exp1` and `trainpace analyze runs/exp1/profile`: the trace, not
    # the run's own JSON files beside it
    from trainpace import runlog
    from trainpace.trace.load import RUN_FILES

    assert {runlog.META_FILE, runlog.SUMMARY_FILE, runlog.PROFILE_FILE} == RUN_FILES
    run = tmp_path / "exp1"
    (run / "profile").mkdir(parents=True)
    for name in ("meta.json", "summary.json"):
        (run / name).write_text("{}")
    (run / "profile" / "profile_analysis.json").write_text("{}")
    trace = run / "profile" / "profile_rank0.pt.trace.json.gz"
    trace.write_bytes(b"")
    assert trace_files([run]) == [str(trace)]
    assert trace_files([run / "profile"]) == [str(trace)]
