import dataclasses
from collections import UserDict, namedtuple

import numpy as np
import pytest
import torch

from trainpace.measure.batch import count_samples, count_tokens, is_pinned, move_to


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
