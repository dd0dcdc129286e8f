import pytest

from trainpace.demo import CharDataset, DemoSettings, TinyGPT, load_text, run_demo
from trainpace.errors import ConfigError
from trainpace.runlog import read_run


def test_the_bundled_text_is_there():
    text = load_text()
    assert text.startswith("Macbeth")
    assert len(text) > 90_000


def test_dataset_labels_are_the_next_characters():
    ds = CharDataset("abcdefgh", seq_len=3)
    item = ds[2]
    assert [ds.vocab[i] for i in item["input_ids"]] == list("cde")
    assert [ds.vocab[i] for i in item["labels"]] == list("def")


def test_model_shapes():
    import torch

    model = TinyGPT(vocab_size=10, seq_len=8)
    assert model(torch.zeros(2, 8, dtype=torch.long)).shape == (2, 8, 10)


@pytest.mark.slow
def test_the_loss_really_goes_down(tmp_path):
    summary, folder = run_demo(DemoSettings(steps=80), out=tmp_path / "demo", console=False,
                               report=False, count_flops=False)
    losses = [r["loss"] for r in read_run(folder).steps]
    assert len(losses) == 80
    assert sum(losses[-10:]) / 10 < losses[0] - 1.0  # from ~4.2 (uniform over 64 chars)
    assert summary.throughput.tokens_per_s == pytest.approx(summary.throughput.samples_per_s * 64)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"steps": 0}, "steps"), ({"workers": -1}, "workers"), ({"slow_data_ms": -2.0}, "slow_data_ms"),
     ({"batch_size": 0}, "batch_size")],
)
def test_bad_settings_name_the_flag(kwargs, key):
    with pytest.raises(ConfigError) as info:
        DemoSettings(**kwargs)
    assert info.value.key == key
