"""compare_runs on two short training runs where throughput and time to target disagree."""

import pytest
import torch

import trainpace
from manual_clock import ManualClock
from trainpace.comparison import compare_runs
from trainpace.report.compare import comparison_renderable
from trainpace.runlog import read_run


def step_s(batch_size):
    """What a step costs on the Meter's clock: 4 ms plus 20 µs a sample."""
    return 0.004 + 20e-6 * batch_size


def train(out, batch_size, steps=100):
    """Real linear regression under the Meter, on a manual clock where each step costs
    ``step_s(batch_size)``: the larger batch has the higher throughput by construction,
    exactly, whatever the load on the machine."""
    clock = ManualClock()
    torch.manual_seed(0)
    w_true = torch.randn(8)
    x = torch.randn(8192, 8)
    y = x @ w_true + 0.1 * torch.randn(8192)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size,
                                         shuffle=True, generator=torch.Generator().manual_seed(0))
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    meter = trainpace.Meter(out, window=25, warmup=2, target_loss=0.05, console=False, report=False,
                            clock=clock)
    done = 0
    while done < steps:
        for xb, yb in meter.loader(loader):
            with meter.step((xb, yb)):
                clock.advance(step_s(batch_size))
                loss = (model(xb).squeeze(-1) - yb).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                meter.observe(loss=loss)
            done += 1
            if done == steps:
                break
    return meter.finish(), meter.path


@pytest.mark.slow
def test_a_larger_batch_with_higher_throughput_that_trains_slower_loses(tmp_path):
    small, small_path = train(tmp_path / "bs16", 16)
    large, large_path = train(tmp_path / "bs512", 512)
    c = compare_runs(read_run(small_path), read_run(large_path))
    a, b = c.runs
    assert a.samples_per_s == pytest.approx(16 / step_s(16))
    assert b.samples_per_s == pytest.approx(512 / step_s(512))
    assert a.reached_target and b.reached_target
    # the same target, smoothed as the Meter smooths it: the Meter's own figures come back
    assert a.time_to_target_s == pytest.approx(small.time.time_to_target_s)
    assert b.steps_to_target == large.time.steps_to_target
    assert (c.winner, c.by) == ("A", "time_to_target")
    assert "although B has the higher throughput" in c.reason
    assert c.target == {"name": "loss", "value": 0.05, "higher_is_better": False}
    assert b.samples_to_target > a.samples_to_target
    assert (a.batch_size, b.batch_size) == (16, 512)
    assert len(comparison_renderable(c).renderables) == 2
