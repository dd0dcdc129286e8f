"""``trainpace analyze TRACE...``: the console report, --json, --html, bad input, bad usage."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainpace.cli import main

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
HANDMADE = TRACES / "handmade_steps.json"
SAMPLED = [TRACES / "sampled_rank-0.json.gz", TRACES / "sampled_rank-1.json.gz"]


def test_console_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(HANDMADE), "--gap-us", "20"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "trainpace analyze · 1 trace(s) · Handmade GPU" in out
    assert "52.4%" in out and "35.7%" in out and "16.7%" in out  # idle, compute, comm hidden
    assert "host wait 85 µs · kernel wait 10 µs · other 35 µs" in out
    assert "Device-idle gaps ≥ 20 µs: 2, 110 µs" in out
    assert "flash_fwd_kernel" in out and "attention" in out
    assert "bottleneck: data loading" in out


def test_json_is_one_object_with_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", *map(str, SAMPLED), "--json", "--workers", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [t["rank"] for t in data["traces"]] == [0, 1]
    ranks = {r["rank"]: r for r in data["ranks"]}
    assert (ranks[0]["idle_us"], ranks[0]["compute_us"], ranks[0]["non_compute_us"]) == \
        (321378.0, 106252.0, 172428.0)
    assert (ranks[1]["idle_pct"], ranks[1]["comm_comp_overlap_pct"]) == (54.72, 20.05)
    assert data["findings"] and data["bottleneck"] == data["summary"]["diagnosis"]["bottleneck"]
    assert data["summary"]["world_size"] == 2


def test_html_page_escapes_trace_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = json.loads(HANDMADE.read_text())
    for event in trace["traceEvents"]:
        if event.get("name") == "flash_fwd_kernel":
            event["name"] = "<script>alert(1)</script>"
    source = tmp_path / "evil.json"
    source.write_text(json.dumps(trace))
    page = tmp_path / "out.html"
    assert main(["analyze", str(source), "--html", str(page), "--json"]) == 0
    captured = capsys.readouterr()
    assert f"wrote {page}" in captured.err
    json.loads(captured.out)  # --json still prints exactly one object
    html = page.read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<svg" in html and "Findings" in html
    assert "src=\"http" not in html and "href=\"http" not in html


def test_bad_trace_is_one_line_and_exit_1(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cut.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X"')
    assert main(["analyze", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"trainpace analyze: error: {bad}:" in err


@pytest.mark.parametrize("args", [[], ["x.json", "--gap-us", "0"], ["x.json", "--top", "-1"],
                                  ["x.json", "--workers", "two"]])
def test_bad_usage_exits_2(args: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["analyze", *args])
    assert info.value.code == 2


def test_analyze_reads_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import threading

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(HANDMADE.read_bytes())

    threading.Thread(target=write, daemon=True).start()
    codes: list[int] = []
    run = threading.Thread(target=lambda: codes.append(main(["analyze", str(fifo), "--json"])),
                           daemon=True)
    run.start()
    run.join(timeout=60)
    assert not run.is_alive(), "analyze hung on a FIFO"
    assert codes == [0]
    assert json.loads(capsys.readouterr().out)["ranks"][0]["idle_pct"] == 52.38


def test_absurd_times_are_skipped_without_a_warning(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    trace = json.loads(HANDMADE.read_text())
    trace["traceEvents"] += [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1e308, "dur": 1e308,
         "args": {"stream": 7, "correlation": 11}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 25, "dur": 1e308,
         "args": {"correlation": 11}},
    ]
    source = tmp_path / "absurd.json"
    source.write_text(json.dumps(trace))
    assert main(["analyze", str(source)]) == 0  # the suite runs with warnings as errors
    out = " ".join(capsys.readouterr().out.split())
    assert "skipped events: 2 malformed: ts or dur negative, infinite or out of range" in out
    assert "52.4%" in out  # the figures of the trace without them
    assert not any(len(word) > 40 and word[:1].isdigit() for word in out.split())


def test_cpu_trace_json_has_the_host_view(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TRACES / "handmade_cpu.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rank = data["ranks"][0]
    assert rank["window_us"] is None and rank["idle"] is None and rank["kernels"] is None
    host = rank["host"]
    assert (host["dataloader_pct"], host["operators_pct"], host["python_pct"]) == \
        (40.0, 28.5, 31.5)
    assert [o["name"] for o in host["top"]][:3] == ["aten::pin_memory", "aten::addmm",
                                                     "aten::stack"]
    assert data["summary"]["device"]["kind"] == "cpu"
    assert data["summary"]["device"]["util_pct"] is None


def test_meter_run_trace_console_and_html(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    trace = TRACES / "cpu_run" / "profile" / "profile_rank0.pt.trace.json.gz"
    page = tmp_path / "cpu.html"
    assert main(["analyze", str(trace), "--html", str(page)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Where the host time went in the profiled steps" in out
    assert "meta.json read" in out and "meter.loader" not in out
    assert "GPU util" not in out
    html = page.read_text()
    assert "GPU util" not in html and "device idle" not in html and "on device" not in html


def test_analyze_loads_only_what_it_uses() -> None:
    # the floor of a quick command: the other verbs, the run-folder reader, torch, rich, and
    # what the diagnosis of a trace never calls (the tuner's results: 7 ms; shlex; pathlib: 9 ms)
    import subprocess
    import sys

    code = ("import sys; from trainpace.cli import main; "
            f"code = main(['analyze', '--json', {str(HANDMADE)!r}]); "
            "print(sorted(m for m in ('trainpace.cli._run', 'trainpace.cli._report', "
            "'trainpace.runlog', 'trainpace.meter', 'torch', 'rich', 'trainpace.tune.tuning', "
            "'shlex', 'pathlib') if m in sys.modules), code, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stderr.strip().splitlines()[-1] == "[] 0"
    assert json.loads(done.stdout)["ranks"][0]["idle_pct"] == 52.38


def test_json_through_orjson_equals_the_stdlib_encoding(capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from trainpace.cli._output import print_json
    from trainpace.trace import analyze_traces

    data = analyze_traces([*SAMPLED, HANDMADE]).to_dict()
    data["extra"] = {1: float("nan"), "µ": [float("inf"), (1, 2)]}
    print_json(data)  # pytest's capture writes UTF-8: orjson
    fast = capsys.readouterr().out
    plain = io.StringIO()  # no encoding: the stdlib
    print_json(data, plain)
    assert json.loads(fast) == json.loads(plain.getvalue())
    assert json.loads(fast)["extra"] == {"1": None, "µ": [None, [1, 2]]}


def test_a_verb_first_command_line_parses_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    from trainpace.cli import build_parser

    argv = ["analyze", str(HANDMADE), "--gap-us", "20", "--top", "3"]
    whole, alone = build_parser().parse_args(argv), build_parser("analyze").parse_args(argv)
    assert vars(whole) == vars(alone)
    with pytest.raises(SystemExit) as bad:
        main(["analyze", str(HANDMADE), "--top", "0"])
    assert bad.value.code == 2
    assert "trainpace analyze: error: argument --top" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "tune-loader" in capsys.readouterr().out  # the full parser lists every verb


@pytest.mark.slow
def test_ranks_in_parallel_processes_give_the_same_json(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """The command's pool of processes (one per rank) gives the serial figures, byte for byte."""
    assert main(["analyze", *map(str, SAMPLED), "--json", "--workers", "1"]) == 0
    serial = capsys.readouterr().out
    assert main(["analyze", *map(str, SAMPLED), "--json", "--workers", "2"]) == 0
    assert capsys.readouterr().out == serial
    assert [r["idle_us"] for r in json.loads(serial)["ranks"]] == [321378.0, 328671.0]


def test_the_command_reads_large_ranks_in_processes_and_small_ones_in_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from trainpace.cli import _analyze

    files = [str(p) for p in SAMPLED]
    assert _analyze._processes(files, None) == 1  # 2 small files: not worth a process
    assert _analyze._processes(files, 2) == 2  # asked for
    assert _analyze._processes(files[:1], 4) == 1  # one file: nothing to share
    monkeypatch.setattr(_analyze, "PARALLEL_MIN_BYTES", 1)
    assert _analyze._processes(files, None) == min(2, os.cpu_count() or 1)
