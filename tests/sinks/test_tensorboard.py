import pytest
import torch

import trainpace

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def test_one_scalar_per_sign_per_window_read_back_with_tensorboard(tmp_path, clock):
    logdir = tmp_path / "tb"
    meter = trainpace.Meter(tmp_path / "run", tensorboard=logdir, window=10, clock=clock,
                            console=False, report=False, count_flops=False)
    for b in meter.loader([torch.zeros(8, 2)] * 30):
        with meter.step(b):
            clock.advance(0.02)
            meter.observe(loss=1.5)
    meter.finish()
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"trainpace/throughput/samples_per_s", "trainpace/time/step_median_ms", "trainpace/time/step_p90_ms",
            "trainpace/data/wait_pct", "trainpace/loss/window_mean"} <= tags
    points = acc.Scalars("trainpace/throughput/samples_per_s")
    assert [p.step for p in points] == [10, 20, 30]
    assert [p.value for p in points] == pytest.approx([400.0] * 3)
    assert [p.value for p in acc.Scalars("trainpace/time/step_median_ms")] == pytest.approx([20.0] * 3)
    assert "trainpace/throughput/tokens_per_s" not in tags  # not measured: no point, not a zero


def test_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("no tensorboard")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(trainpace.MissingDependencyError, match=r"pip install 'trainpace\[tensorboard\]'"):
        trainpace.Meter(tensorboard=tmp_path / "tb", console=False)


def test_an_unwritable_folder_is_a_warning_and_training_goes_on(tmp_path, clock, caplog):
    import logging

    (tmp_path / "file").write_text("")
    logdir = tmp_path / "file" / "tb"  # under a file: no folder can be made there
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        meter = trainpace.Meter(tmp_path / "run", tensorboard=logdir, window=10, clock=clock,
                                console=False, report=False, count_flops=False)
        for b in meter.loader([torch.zeros(8, 2)] * 10):
            with meter.step(b):
                clock.advance(0.01)
        summary = meter.finish()
    assert summary.steps.total == 10
    (warning,) = [r.getMessage() for r in caplog.records if "tensorboard=" in r.getMessage()]
    assert f"starting tensorboard='{logdir}' failed" in warning
    assert "the run goes on without it" in warning
