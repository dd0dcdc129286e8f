import dataclasses
from collections import UserDict, namedtuple

import numpy as np
import pytest
import torch

from trainpace.measure.batch import (
    FIX,
    SampleCount,
    count_samples,
    count_tokens,
    is_pinned,
    move_to,
    samples_in,
)


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


class Encoding(UserDict):
    """Shaped like HF's BatchEncoding: a UserDict of tensors."""


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (torch.zeros(8, 3), 8),
        ((torch.zeros(5, 2), torch.zeros(5)), 5),
        ([torch.zeros(7, 2), torch.zeros(7)], 7),
        ({"pixel_values": torch.zeros(4, 3, 2, 2), "labels": torch.zeros(4)}, 4),
        ({"meta": "x", "input_ids": torch.zeros(6, 10)}, 6),
        ({"a": {"b": torch.zeros(3, 1)}}, 3),
        (Pair(torch.zeros(9, 2), torch.zeros(9)), 9),
        (Encoding(input_ids=torch.zeros(2, 5)), 2),
        (["some text", "more text", "third"], 3),
        (np.zeros((11, 2)), 11),
        (torch.tensor(3.0), None),
        ("not a batch", None),
        ({}, None),
    ],
)
def test_samples_are_the_first_dimension_of_the_main_tensor(batch, expected):
    assert count_samples(batch) == expected


def test_tokens_without_padding_from_the_attention_mask():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    batch = {"input_ids": torch.zeros(3, 5, dtype=torch.long), "attention_mask": mask}
    assert count_tokens(batch) == (9, "non_padding")
    assert count_tokens(Encoding(batch)) == (9, "non_padding")


def test_tokens_without_ignored_labels_when_there_is_no_mask():
    labels = torch.tensor([[5, 6, -100, -100], [7, -100, -100, -100]])
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "labels": labels}
    assert count_tokens(batch) == (3, "non_padding")


def test_labels_of_another_shape_are_not_tokens():
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "labels": torch.tensor([0, 1])}
    assert count_tokens(batch) == (8, "all")


def test_all_input_ids_without_mask_or_labels():
    assert count_tokens({"input_ids": torch.zeros(4, 16, dtype=torch.long)}) == (64, "all")


def test_tuple_of_encoding_and_labels_looks_into_the_mapping():
    enc = {"input_ids": torch.zeros(2, 3), "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}
    assert count_tokens((enc, torch.zeros(2))) == (3, "non_padding")


def test_no_tokens_in_an_image_batch():
    assert count_tokens((torch.zeros(4, 3, 8, 8), torch.zeros(4))) == (None, None)
    assert count_tokens(torch.zeros(4, 3)) == (None, None)


def test_move_to_rebuilds_containers():
    Point = namedtuple("Point", "a b")
    batch = {"x": (torch.zeros(2), [torch.ones(1)]), "p": Point(torch.zeros(1), "keep"),
             "d": Pair(torch.zeros(1), torch.ones(1)), "s": "text"}
    moved = move_to(batch, torch.device("cpu"), non_blocking=False)
    assert isinstance(moved["p"], Point) and moved["p"].b == "keep"
    assert isinstance(moved["d"], Pair)
    assert moved["s"] == "text"
    assert torch.equal(moved["x"][1][0], torch.ones(1))


def test_unpinned_cpu_batch_is_not_pinned():
    assert not is_pinned((torch.zeros(2), torch.zeros(2)))
    assert not is_pinned("no tensors")


class Custom:
    """A batch type trainpace knows nothing about."""


@pytest.mark.parametrize(
    ("batch", "kind", "why"),
    [
        (None, "NoneType", "it holds no tensor or array"),
        ("not a batch", "str", "it holds no tensor or array"),
        (Custom(), "Custom", "it holds no tensor or array"),
        ({"meta": "x", "n": 3}, "dict", "it holds no tensor or array"),
        (torch.tensor(3.0), "Tensor", "a 0-d tensor has no batch dimension"),
    ],
)
def test_an_uncountable_batch_is_none_with_its_type_and_the_fix(batch, kind, why):
    counted = samples_in(batch)
    assert counted.samples is None
    assert counted.reason == (f"cannot count the samples of a batch of type {kind} ({why}); "
                              f"samples_per_s is null; {FIX}")
    assert "Meter(samples=" in counted.reason
    assert count_samples(batch) is None


def test_sequence_first_batches_are_ambiguous_not_a_guess():
    # pytorch/examples word_language_model: data[bptt=35, batch=20], target[35 * 20 = 700]
    data, target = torch.zeros(35, 20, dtype=torch.long), torch.zeros(700, dtype=torch.long)
    counted = samples_in((data, target))
    assert counted.samples is None
    assert counted.reason.startswith("the samples of a batch of type tuple are ambiguous: its "
                                     "tensors disagree on their first dimension (35, 700; "
                                     "sequence-first?)")
    assert FIX in counted.reason
    # the token ids are still counted: every entry of the 2-D integer tensor
    assert count_tokens((data, target)) == (700, "all")


def test_tensors_that_agree_are_counted_and_a_telling_key_decides():
    assert samples_in((torch.zeros(4, 3), torch.zeros(4), [torch.zeros(4, 1)])) == SampleCount(4)
    # a key that names the main input wins over a tensor of another length beside it
    assert samples_in({"input_ids": torch.zeros(6, 9), "vocab": torch.zeros(100)}) == SampleCount(6)
    assert samples_in({"a": torch.zeros(6, 9), "b": torch.zeros(100)}).samples is None


def test_a_2d_integer_tensor_is_token_ids():
    assert count_tokens(torch.zeros(8, 128, dtype=torch.long)) == (1024, "all")
    assert count_tokens(torch.zeros(8, 128, dtype=torch.int32)) == (1024, "all")
    assert count_tokens(torch.zeros(8, 128)) == (None, None)  # floats are features
    assert count_tokens(torch.zeros(8, 28, dtype=torch.uint8)) == (None, None)  # pixels
    assert count_tokens((torch.zeros(8, 784), torch.zeros(8, dtype=torch.long))) == (None, None)
