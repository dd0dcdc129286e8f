"""What is tuned: a DataLoader's own settings kept; factories loaded with named errors."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from trainpace.errors import ConfigError
from trainpace.tune import DatasetError, load_factory
from trainpace.tune.loader_source import _ItemFailedError, as_source, failed_item
from tune.loaders import Sleepy


def _collate(samples):
    return torch.stack(samples) * 2


def test_a_dataloader_keeps_its_sampler_collate_drop_last_and_batch_size():
    data = Sleepy(n=100)
    sampler = SequentialSampler(data)
    loader = DataLoader(data, batch_size=7, sampler=sampler, collate_fn=_collate, drop_last=True,
                        num_workers=1, prefetch_factor=3)
    source = as_source(loader, batch_size=None, collate_fn=None)
    assert source.batch_size == 7
    assert source.dataset is data
    assert source.kept["sampler"] is sampler
    assert source.kept["drop_last"] is True
    assert source.collate_fn is _collate
    assert source.original == {"num_workers": 1, "prefetch_factor": 3, "pin_memory": False,
                               "persistent_workers": False}
    rebuilt = source.loader({"num_workers": 0}, timeout_s=5)
    assert rebuilt.sampler is sampler
    assert rebuilt.batch_size == 7
    assert rebuilt.drop_last is True
    assert rebuilt.collate_fn is _collate
    assert len(rebuilt) == 14
    first = next(iter(rebuilt))
    assert torch.equal(first[:, 0], torch.arange(7, dtype=torch.float32) * 2)


def test_a_custom_batch_sampler_is_kept_whole():
    data = Sleepy(n=10)
    batches = BatchSampler(SequentialSampler(data), batch_size=3, drop_last=False)
    source = as_source(DataLoader(data, batch_sampler=batches), batch_size=None, collate_fn=None)
    assert source.kept["batch_sampler"] is batches
    assert source.loader({"num_workers": 0}, timeout_s=5).batch_sampler is batches


def test_not_a_dataset_is_a_config_error():
    with pytest.raises(ConfigError, match="dataset_or_loader must be a torch Dataset"):
        as_source(42, batch_size=None, collate_fn=None)


def test_the_failing_index_travels_in_the_message():
    exc = _ItemFailedError("Caught X.\n  raise _ItemFailedError(f\"[trainpace item {index!r}] "
                           "{what}\")\n_ItemFailedError: [trainpace item 12] OSError: gone")
    assert failed_item(exc) == ("12", "OSError: gone")
    assert failed_item(ValueError("other")) is None


def test_load_factory_calls_it():
    made, spec = load_factory("tune.loaders:sleepy_loader")
    assert isinstance(made, DataLoader)
    assert spec == "tune.loaders:sleepy_loader"


def test_load_factory_from_a_file(tmp_path, monkeypatch):
    (tmp_path / "mydata.py").write_text("def make():\n    return [1, 2, 3]\n")
    monkeypatch.chdir(tmp_path)
    made, _ = load_factory("mydata.py:make")
    assert made == [1, 2, 3]


@pytest.mark.parametrize(("spec", "message"), [
    ("nowhere_at_all:make", "nowhere_at_all:make: cannot import 'nowhere_at_all'"),
    ("tune.loaders:missing", "tune.loaders:missing: tune.loaders has no attribute 'missing'"),
    ("tune.loaders:Sleepy.n", "has no attribute 'Sleepy.n'"),
    ("tune.loaders:not_a_dataset", "not_a_dataset() returned builtins.int, not a Dataset"),
    ("tune.loaders:raises", "calling raises() raised OSError: no such bucket"),
    ("tune.loaders:CORES_X", "has no attribute"),
    ("missing.py:make", "missing.py:make: no such file"),
])
def test_load_factory_errors_name_the_factory(spec, message):
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_factory(spec)


def test_load_factory_needs_a_colon():
    with pytest.raises(ConfigError, match="FACTORY must be MODULE:FACTORY"):
        load_factory("tune.loaders")


def test_the_line_to_paste_keeps_what_the_loader_had():
    from trainpace.tune import Setting
    from trainpace.tune.verdict import loader_line

    data = Sleepy(n=10)
    setting = Setting(num_workers=3, prefetch_factor=2, pin_memory=True, persistent_workers=True)
    shuffled = as_source(DataLoader(data, batch_size=4, shuffle=True, drop_last=True,
                                    collate_fn=_collate), batch_size=None, collate_fn=None)
    assert loader_line(setting, shuffled.batch_size, shuffled.kept, shuffled.collate_fn) == (
        "DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, collate_fn=collate_fn, "
        "num_workers=3, prefetch_factor=2, persistent_workers=True, pin_memory=True)")
    plain = as_source(data, batch_size=8, collate_fn=None)
    none = Setting(num_workers=0, prefetch_factor=None, pin_memory=False, persistent_workers=False)
    assert loader_line(none, plain.batch_size, plain.kept, plain.collate_fn) == (
        "DataLoader(dataset, batch_size=8, num_workers=0, pin_memory=False)")
    custom = as_source(DataLoader(data, batch_size=2, sampler=[3, 1, 2]), batch_size=None,
                       collate_fn=None)
    assert "sampler=sampler" in loader_line(none, custom.batch_size, custom.kept, None)
