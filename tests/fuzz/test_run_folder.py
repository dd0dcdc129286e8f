"""Fuzzing the run folder: whatever its files hold, ``report`` and ``compare`` end with 0 or 1
and a message, never a traceback (issue 26)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fuzz.conftest import FUZZ, captured
from trainpace.cli import main
from trainpace.summary import Summary

NUMBERS = st.one_of(st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.none(), st.booleans())
TEXT = st.text(max_size=20)
JSON = st.recursive(st.one_of(NUMBERS, TEXT),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(TEXT, inner, max_size=4)),
                    max_leaves=12)
STEP_KEYS = ("step", "t_s", "step_s", "wait_s", "samples", "tokens", "loss", "warmup",
             "micro_batches", "metric")


def _dumps(value: Any) -> str:
    return json.dumps(value)  # NaN and Infinity as Python writes them: readers must cope


@st.composite
def summaries(draw: st.DrawFn) -> str:
    """A valid summary with some values replaced by anything JSON can hold."""
    data = Summary(run_id="r").to_dict()
    for _ in range(draw(st.integers(0, 4))):
        section = draw(st.sampled_from(sorted(data)))
        if isinstance(data[section], dict) and data[section]:
            key = draw(st.sampled_from(sorted(data[section])))
            data[section][key] = draw(JSON)
        else:
            data[section] = draw(JSON)
    return _dumps(data)


@st.composite
def step_lines(draw: st.DrawFn) -> str:
    lines = []
    for i in range(draw(st.integers(0, 30))):
        record: dict[str, Any] = {"step": i + 1, "t_s": 0.1 * (i + 1), "step_s": 0.1,
                                  "samples": 8}
        if draw(st.booleans()):
            record[draw(st.sampled_from(STEP_KEYS))] = draw(NUMBERS)
        line = _dumps(record)
        if draw(st.integers(0, 9)) == 0:
            line = draw(st.sampled_from([line[:len(line) // 2], "\ufeff" + line, "[]", "",
                                         draw(TEXT)]))
        lines.append(line)
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@st.composite
def metas(draw: st.DrawFn) -> str:
    meta: dict[str, Any] = {"schema": "trainpace.meta/1", "run_id": draw(TEXT),
                            "config": {"warmup": draw(st.sampled_from([0, 2, "auto"])),
                                       "window": draw(st.sampled_from([2, 5, 100]))}}
    for key in draw(st.lists(st.sampled_from(["world_size", "rank", "host", "started_at",
                                              "finished_at", "loader", "clock", "config"]),
                             max_size=3)):
        meta[key] = draw(JSON)
    return _dumps(meta)


@st.composite
def system_lines(draw: st.DrawFn) -> str:
    rows = [{"t_s": 0.1 * i, "device_util_pct": draw(NUMBERS), "temperature_c": draw(NUMBERS),
             "host": draw(st.one_of(st.none(), st.dictionaries(TEXT, NUMBERS, max_size=2)))}
            for i in range(draw(st.integers(0, 5)))]
    return "\n".join(map(_dumps, rows))


FILES = {
    "meta.json": st.one_of(metas(), metas(), JSON.map(_dumps)),
    "summary.json": st.one_of(summaries(), JSON.map(_dumps), TEXT),
    "steps.jsonl": step_lines(),
    "system.jsonl": st.one_of(system_lines(), system_lines(),
                              st.lists(JSON.map(_dumps), max_size=3).map("\n".join)),
}


@st.composite
def run_folders(draw: st.DrawFn) -> dict[str, str]:
    """File name (maybe inside a rank folder) -> its text."""
    files: dict[str, str] = {}
    for prefix in draw(st.sampled_from([[""], [""], [""], ["rank0/"], ["rank0/", "rank1/"],
                                        ["", "rank0/"], ["rank3/", "rank999999999999/"]])):
        for name, strategy in FILES.items():
            if draw(st.integers(0, 4)):  # most files present
                files[prefix + name] = draw(strategy)
    return files


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return root


def _ends_cleanly(argv: list[str]) -> None:
    with captured() as (out, err):
        code = main(argv)
    assert code in (0, 1), (code, err.getvalue())
    if code == 1:
        assert err.getvalue().count("\n") >= 1 and "Traceback" not in err.getvalue()
    elif "--json" in argv:
        json.loads(out.getvalue())  # one JSON object


@FUZZ
@given(run_folders(), st.sampled_from([[], ["--json"], ["--html"]]))
def test_report_of_any_run_folder_ends_with_0_or_1(files, flags):
    with tempfile.TemporaryDirectory() as tmp:
        if flags == ["--html"]:
            flags = ["--html", str(Path(tmp) / "page.html")]
        _ends_cleanly(["report", str(_write(Path(tmp) / "run", files)), *flags])


@FUZZ
@given(run_folders(), run_folders())
def test_compare_of_any_two_run_folders_ends_with_0_or_1(a, b):
    with tempfile.TemporaryDirectory() as tmp:
        _ends_cleanly(["compare", str(_write(Path(tmp) / "a", a)),
                       str(_write(Path(tmp) / "b", b)), "--json"])
