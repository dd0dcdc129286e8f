"""Samples and tokens in a batch, and moving a batch to a device.

A batch is whatever a loader yields: a tensor, a dict (or HF ``BatchEncoding``, a Mapping),
a tuple or list, a dataclass, or a nesting of these. The samples are the first dimension of
the batch's main tensor — or unknown, with the reason (:func:`samples_in`), when the batch has
none or its tensors disagree; the tokens are the real (non-padding) ones when the batch says
which are real. Counting never synchronizes a device: on an accelerator the token count stays a
device tensor until the window boundary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

# Keys that name a batch's main input, most telling first: the samples are its first dimension.
_SAMPLE_KEYS = ("input_ids", "pixel_values", "input_values", "inputs", "input", "x", "images",
                "image", "features", "data", "labels", "label", "y", "targets", "target")
IGNORE_INDEX = -100  # labels at this value carry no loss (PyTorch's CrossEntropyLoss default)

TokenCount = int | torch.Tensor


@dataclass(frozen=True)
class SampleCount:
    """The samples of a batch, or why they cannot be counted (the warning to give, once)."""

    samples: int | None
    reason: str | None = None  # set exactly when samples is None


FIX = ("pass Meter(samples=lambda batch: ...) to say how many samples a batch holds "
       "(e.g. batch[0].shape[1] for sequence-first batches)")


def samples_in(batch: Any) -> SampleCount:
    """Samples in ``batch``: the first dimension of its main tensor.

    None, with the reason, when the batch has no recognisable batch dimension (None, a
    string, a custom object, a mapping with no tensor), or when its tensors disagree on their
    first dimension — e.g. ``(data[35, 20], target[700])`` from a sequence-first language
    model, where 35 is the sequence length and 20 the batch: the count is ambiguous, and a
    guess would be silently wrong.
    """
    # The cheap exact-type checks come first: this runs for every batch of the training.
    if type(batch) is torch.Tensor:
        if batch.dim() > 0:
            return SampleCount(int(batch.shape[0]))
        return SampleCount(None, _uncountable(batch, "a 0-d tensor has no batch dimension"))
    if isinstance(batch, (tuple, list)) and batch and all(
            isinstance(item, (str, bytes, int, float)) for item in batch):
        return SampleCount(len(batch))  # a list of raw samples (e.g. strings)
    if isinstance(batch, (dict, Mapping)):
        for key in _SAMPLE_KEYS:  # a telling key names the main tensor: no ambiguity
            if key in batch:
                found = count_samples(batch[key])
                if found is not None:
                    return SampleCount(found)
    firsts = sorted(set(_first_dims(batch, depth=0)))
    if len(firsts) == 1:
        return SampleCount(firsts[0])
    if not firsts:
        return SampleCount(None, _uncountable(batch, "it holds no tensor or array"))
    dims = ", ".join(str(d) for d in firsts[:4]) + (", …" if len(firsts) > 4 else "")
    return SampleCount(None, (
        f"the samples of a batch of type {type(batch).__name__} are ambiguous: its tensors "
        f"disagree on their first dimension ({dims}; sequence-first?); samples_per_s is "
        f"null; {FIX}"))


def _uncountable(batch: Any, why: str) -> str:
    return (f"cannot count the samples of a batch of type {type(batch).__name__} ({why}); "
            f"samples_per_s is null; {FIX}")


def count_samples(batch: Any) -> int | None:
    """Samples in ``batch``, or None when they cannot be counted (:func:`samples_in` says why)."""
    return samples_in(batch).samples


def _first_dims(batch: Any, depth: int) -> Iterator[int]:
    """The first dimension of every tensor or array in ``batch`` (containers walked, a few
    levels deep)."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() > 0:
            yield int(batch.shape[0])
        return
    if depth > 4 or isinstance(batch, (str, bytes)):
        return
    if isinstance(batch, (tuple, list)):
        for item in batch:
            yield from _first_dims(item, depth + 1)
    elif isinstance(batch, (dict, Mapping)):
        for item in batch.values():
            yield from _first_dims(item, depth + 1)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from _first_dims(getattr(batch, f.name), depth + 1)
    else:
        shape = getattr(batch, "shape", None)  # numpy arrays and other array-likes
        if isinstance(shape, tuple) and shape and isinstance(shape[0], int):
            yield shape[0]


def _fields(batch: Any) -> Mapping[str, Any] | None:
    if isinstance(batch, (dict, Mapping)):
        return batch
    if isinstance(batch, (torch.Tensor, tuple, list)):
        return None
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    return None


def count_tokens(batch: Any) -> tuple[TokenCount | None, str | None]:
    """Tokens in ``batch`` and how they were counted: "non_padding", "all", or (None, None).

    - ``attention_mask`` present: its non-zero entries (real tokens);
    - else ``labels`` shaped like ``input_ids``: the entries not equal to -100 (the ignore index);
    - else ``input_ids``: all of its entries;
    - else a 2-D int32/int64 tensor (the batch, or the first such item of a tuple or list):
      token ids, all of its entries;
    - else no tokens (not a token batch).
    """
    fields = _fields(batch)
    if fields is None:
        if _is_token_ids(batch):
            return int(batch.numel()), "all"
        if isinstance(batch, (tuple, list)):
            for item in batch:  # e.g. (encoding, labels): look into the first mapping inside
                if _fields(item) is not None:
                    return count_tokens(item)
            for item in batch:  # e.g. (data[35, 20], target[700]): the token ids come first
                if _is_token_ids(item):
                    return int(item.numel()), "all"
        return None, None
    mask = fields.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return _count_nonzero(mask), "non_padding"
    input_ids = fields.get("input_ids")
    labels = fields.get("labels")
    if (
        isinstance(input_ids, torch.Tensor)
        and isinstance(labels, torch.Tensor)
        and labels.shape == input_ids.shape
    ):
        return _count_nonzero(labels != IGNORE_INDEX), "non_padding"
    if isinstance(input_ids, torch.Tensor):
        return int(input_ids.numel()), "all"
    return None, None


def _is_token_ids(value: Any) -> bool:
    """A 2-D tensor of int32/int64: token ids (sequence × batch or batch × sequence)."""
    return (isinstance(value, torch.Tensor) and value.dim() == 2
            and value.dtype in (torch.int64, torch.int32))


def _count_nonzero(tensor: torch.Tensor) -> TokenCount:
    count = torch.count_nonzero(tensor)
    # On the CPU reading the count is free; on an accelerator it would be a sync, so the
    # device tensor is kept and read once at the window boundary.
    return int(count) if count.device.type == "cpu" else count


def move_to(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """``batch`` with every tensor moved to ``device`` (containers rebuilt, others kept)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    mover = getattr(batch, "to", None)
    if isinstance(batch, Mapping) and callable(mover):
        # HF BatchEncoding and similar mappings know how to move themselves.
        return mover(device)
    if isinstance(batch, Mapping):
        return type(batch)({k: move_to(v, device, non_blocking) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(move_to(v, device, non_blocking) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(move_to(v, device, non_blocking) for v in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {f.name: move_to(getattr(batch, f.name), device, non_blocking)
                   for f in dataclasses.fields(batch) if f.init}
        return dataclasses.replace(batch, **changes)
    return batch


def is_pinned(batch: Any) -> bool:
    """True when every CPU tensor of ``batch`` is pinned (so non_blocking copies are async)."""
    tensors = list(_tensors(batch))
    return bool(tensors) and all(t.device.type != "cpu" or t.is_pinned() for t in tensors)


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from _tensors(value)
    elif isinstance(batch, (tuple, list)):
        for value in batch:
            yield from _tensors(value)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from _tensors(getattr(batch, f.name))

