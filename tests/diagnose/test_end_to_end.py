"""Real (short) CPU training runs under the Meter, diagnosed: the injected cause comes out.

Each run injects a known cause (a per-sample sleep in the dataset, a sleep every N steps) and
checks the diagnosis names it, with figures consistent with the truth measured in the run.
"""

import time

import pytest
import torch

import trainpace
from trainpace.demo import DemoSettings, run_demo

pytestmark = pytest.mark.slow


def test_slow_data_is_data_loading(tmp_path):
    # 4 ms per sample × 16 samples, loaded by the training loop itself (num_workers=0)
    settings = DemoSettings(steps=45, workers=0, slow_data_ms=4.0, batch_size=16, seq_len=16)
    summary, _ = run_demo(settings, out=tmp_path / "slow", console=False, report=False, warmup=2)
    d = summary.diagnosis
    assert d.bottleneck == "data_loading"
    finding = next(f for f in d.findings if f.id == "data_wait")
    assert finding.evidence["wait_pct"] == summary.data.wait_pct >= 20.0
    assert summary.data.wait_s_per_step >= 16 * 0.004  # at least the injected sleep
    assert summary.steps.measured >= 20
    assert finding.severity == "critical"
    assert "with `num_workers=0`; try `DataLoader(num_workers=" in finding.advice[0]


def test_a_fast_loader_is_not_data_loading(tmp_path):
    summary, _ = run_demo(DemoSettings(steps=25, batch_size=16, seq_len=16), out=tmp_path / "fast",
                          console=False, report=False)
    assert summary.data.wait_pct < 10.0
    assert summary.diagnosis.bottleneck != "data_loading"
    assert not any(f.id == "data_wait" for f in summary.diagnosis.findings)


def test_a_periodic_stall_is_found_with_its_period(tmp_path):
    # steps of ~20 ms (a sleep: robust to a loaded machine), a 250 ms stall every 10th step
    period, stall_s = 10, 0.25
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 32)
    meter = trainpace.Meter(tmp_path / "stall", window=20, warmup=1, console=False, report=False)
    for step in range(1, 61):
        with meter.step(x):
            time.sleep(0.02)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % period == 0:
                time.sleep(stall_s)  # e.g. a checkpoint save every 10 steps
    summary = meter.finish()
    finding = next(f for f in summary.diagnosis.findings if f.id == "periodic_stall")
    ev = finding.evidence
    assert ev["period_steps"] == period
    expected = [10, 20, 30, 40, 50, 60]
    assert ev["outlier_steps"] == expected
    assert ev["lost_s"] >= len(expected) * stall_s * 0.9  # the injected sleeps, give or take
    assert ev["in_data_wait_pct"] < 50
    assert finding.severity in ("warning", "critical")  # ≥ 5% of the run
    assert "checkpoint save" in finding.advice[0]
