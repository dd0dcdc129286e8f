"""The Meter's profile window, with a real torch.profiler run on the CPU."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from trainpace.errors import ConfigError
from trainpace.trace.capture import ProfileWindow
from trainpace.trace.load import load_trace


def _train(window: ProfileWindow, steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 16)),
                                         batch_size=4)
    batches = iter(loader)
    for step in range(1, steps + 1):
        window.step_begin(step)
        (x,) = next(batches)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        window.step_end(step)


def _step_names(path: Path) -> list[str]:
    cols = load_trace(path)
    return sorted({cols.names[i] for i in cols.name if cols.names[i].startswith("ProfilerStep#")})


def test_window_records_the_meter_steps(tmp_path: Path) -> None:
    window = ProfileWindow(3, 6, tmp_path)
    assert window.trace_path is None
    _train(window, 8)
    assert window.trace_path == tmp_path / "profile_rank0.pt.trace.json.gz"
    assert not window.recording
    assert _step_names(window.trace_path) == ["ProfilerStep#3", "ProfilerStep#4",
                                              "ProfilerStep#5"]
    analysis = window.analyze()
    assert analysis is not None
    r = analysis.ranks[0]
    assert r.steps.count == 3
    assert r.steps.dataloader_span_pct is not None and r.steps.dataloader_span_pct > 0
    assert r.idle is None and any("no device events" in n for n in r.notes)
    assert analysis.summary.time.step_s_median is not None


def test_window_closed_early_keeps_what_it_recorded(tmp_path: Path) -> None:
    window = ProfileWindow(2, 50, tmp_path)
    _train(window, 4)
    assert window.recording and window.trace_path is None
    window.close()
    assert window.trace_path is not None
    assert _step_names(window.trace_path) == ["ProfilerStep#2", "ProfilerStep#3",
                                              "ProfilerStep#4"]


def test_outside_the_window_nothing_happens(tmp_path: Path) -> None:
    window = ProfileWindow(100, 101, tmp_path)
    _train(window, 3)
    assert not window.recording and window.trace_path is None
    assert window.analyze() is None
    assert list(tmp_path.iterdir()) == []


def test_profiler_failure_never_reaches_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("another profiler is already running")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    window = ProfileWindow(1, 3, tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainpace.trace.capture"):
        _train(window, 4)
    assert window.trace_path is None and window.analyze() is None
    assert len(caplog.records) == 1
    assert "another profiler is already running" in caplog.records[0].getMessage()


def test_unreadable_trace_analysis_returns_none(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    window = ProfileWindow(1, 3, tmp_path)
    _train(window, 3)
    assert window.trace_path is not None
    window.trace_path.write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING, logger="trainpace.trace.capture"):
        assert window.analyze() is None
    assert "could not analyze" in caplog.text


@pytest.mark.parametrize(("start", "stop"), [(0, 3), (5, 5), (5, 2)])
def test_bad_window(tmp_path: Path, start: int, stop: int) -> None:
    with pytest.raises(ConfigError, match="profile_steps"):
        ProfileWindow(start, stop, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_window_on_cuda_sees_the_kernels(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    window = ProfileWindow(2, 6, tmp_path)
    for step in range(1, 8):
        window.step_begin(step)
        x = torch.randn(256, 512, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        window.step_end(step)
    torch.cuda.synchronize()
    analysis = window.analyze()
    assert analysis is not None
    r = analysis.ranks[0]
    assert r.device_events > 0 and r.idle_pct is not None and r.kernels is not None
    assert r.compute_pct is not None and r.compute_pct > 0
    assert {c.category for c in r.kernels.categories} & {"gemm", "elementwise"}
    assert r.window_steps == 3  # HTA leaves the last of the four profiled steps out
    assert analysis.summary.device.kind == "cuda" and analysis.summary.kernels.source == "trace"
