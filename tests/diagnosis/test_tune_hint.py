"""The data_wait finding and the DataLoader tuner: its command named, or its measurement."""

import pytest
import torch

import trainpace


def test_the_data_wait_finding_names_the_tuner_command_with_the_step_to_hide():
    from trainpace.diagnosis import diagnose
    from trainpace.summary import Data, Steps, Summary, Time

    summary = Summary(steps=Steps(total=100, warmup=0, measured=100),
                      time=Time(step_s_median=0.1),
                      data=Data(wait_s_per_step=0.04, wait_pct=40.0))
    finding = next(f for f in diagnose(summary).findings if f.id == "data_wait")
    assert finding.evidence["tune_command"].startswith("trainpace tune-loader MODULE:FACTORY "
                                                       "--step-ms 60")
    assert any("tune-loader" in line for line in finding.advice)


class _Clocked(torch.utils.data.Dataset):
    """Each sample takes 4 ms on the Meter's clock (the tuner, on real time, finds it free)."""

    def __init__(self, clock):
        self.clock = clock

    def __len__(self):
        return 256

    def __getitem__(self, i):
        self.clock.advance(0.004)
        return torch.ones(4)


@pytest.mark.slow
def test_the_meter_tunes_its_own_loader_when_asked(tmp_path, clock):
    # 32 ms of loading before each 30 ms step: the wait is over half of it
    loader = torch.utils.data.DataLoader(_Clocked(clock), batch_size=8)
    meter = trainpace.Meter(tmp_path / "run", window=10, console=False, report=False,
                            count_flops=False, tune_loader_s=8, clock=clock)
    for batch in meter.loader(loader):
        with meter.step(batch):
            clock.advance(0.03)
    summary = meter.finish()
    assert summary.data.wait_pct == pytest.approx(100 * 0.032 / 0.062)
    finding = next(f for f in summary.diagnosis.findings if f.id == "data_wait")
    assert finding.advice[0].startswith("measured: "), finding.advice


def test_the_tuner_command_names_what_the_user_must_supply():
    from trainpace.diagnosis.loading import tune_command

    meta = {"loader": {"class": "torch.utils.data.dataloader.DataLoader", "num_workers": 0}}
    assert tune_command(meta, 0.045) == (
        "trainpace tune-loader MODULE:FACTORY --step-ms 45  (FACTORY: a function in MODULE "
        "that returns your DataLoader; it finds the fewest workers that hide the wait)")
    assert tune_command(None) == (
        "trainpace tune-loader MODULE:FACTORY --step-ms STEP_MS  (FACTORY: a function in "
        "MODULE that returns your dataset or DataLoader; it finds the fewest workers that "
        "hide the wait)")
    assert "--step-ms STEP_MS " in tune_command({}, 0.0)


def test_the_diagnosis_loads_neither_torch_nor_the_tuner():
    import subprocess
    import sys

    code = ("import sys; from trainpace.diagnosis import diagnose; "
            "print(sorted(m for m in ('torch', 'trainpace.tune') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
