"""Reading a JSON object back into typed, frozen dataclasses, each value checked against its
field's annotation: what :meth:`trainpace.summary.Summary.from_dict` uses.

A value of the wrong type is a :class:`~trainpace.errors.RunFolderError` naming its path
(``time.wall_s is 'slow', expected a number or null``); a float that is not finite (NaN, an
overflow) is unknown (None) where the field allows None; a key the dataclass does not have is
ignored (a newer writer's).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import operator
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from trainpace.errors import RunFolderError

_T = TypeVar("_T")


def build(cls: type[_T], data: Any, *, nested: Mapping[tuple[type, str], type],
          lists: frozenset[tuple[type, str]], where: str = "") -> _T:
    """``cls`` from a JSON object, each field checked against its annotation; the fields in
    ``nested`` (``(owner, field) -> section type``) are rebuilt as sections, those in
    ``lists`` as lists of them."""
    if not isinstance(data, Mapping):
        raise RunFolderError(f"{where or 'the summary'} is {_shown(data)}, expected an object")
    kwargs: dict[str, Any] = {}
    hints = _hints(cls)  # type: ignore[arg-type]
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue  # an extension key an older writer did not know: keep the default
        path = f"{where}.{f.name}" if where else f.name
        value = data[f.name]
        section = nested.get((cls, f.name))
        if section is not None and value is not None:
            if (cls, f.name) in lists:
                if not isinstance(value, list):
                    raise RunFolderError(f"{path} is {_shown(value)}, expected a list")
                value = [build(section, v, nested=nested, lists=lists, where=f"{path}[{i}]")
                         for i, v in enumerate(value)]
            else:
                value = build(section, value, nested=nested, lists=lists, where=path)
        else:
            value = _checked(value, hints[f.name], path)
        kwargs[f.name] = value
    return cls(**kwargs)


_MAX_INT = 2**53  # a count beyond what a float holds exactly is damage, not a count


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The section's annotations as types (they are strings in this module), once."""
    return typing.get_type_hints(cls)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _checked(value: Any, hint: Any, path: str) -> Any:
    """``value`` if it fits ``hint`` (int, float, str, bool, a Literal, dict, list, or any of
    them or None), else RunFolderError; a non-finite float is None where None is allowed."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union,
                                                                   types.UnionType) else (hint,)
    nullable = type(None) in options
    if value is None:
        if nullable or hint is Any:
            return None
        raise RunFolderError(f"{path} is null, expected {_expected(options)}")
    for option in options:
        origin = typing.get_origin(option) or option
        if option is Any:
            return value
        if origin is typing.Literal:
            if value in typing.get_args(option):
                return value
        elif option in (int, float) and isinstance(value, numbers.Real) and not _is_bool(value):
            number = (operator.index(value) if isinstance(value, numbers.Integral)
                      else float(value))  # numpy scalars too (the Meter's own summaries)
            if isinstance(number, float) and option is int and number.is_integer():
                number = int(number)  # 3.0 steps: 3
            if isinstance(number, int):  # an int stays one, in a float field too (round trip)
                if abs(number) <= _MAX_INT:
                    return number
            elif option is float and math.isfinite(number):
                return number
            if nullable and not (isinstance(number, float) and option is int):
                return None  # NaN, an overflow, a count beyond a float: unknown
        elif origin is bool:
            if _is_bool(value):
                return bool(value)
        elif origin is dict and isinstance(value, Mapping):
            item = (typing.get_args(option) or (Any, Any))[1]
            return {k: _checked(v, item, f"{path}.{k}") for k, v in value.items()}
        elif origin is list and isinstance(value, (list, tuple)):
            item = (typing.get_args(option) or (Any,))[0]
            return [_checked(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        elif origin is str and isinstance(value, str):
            return value
    return _reject(value, options, path)


def _is_bool(value: Any) -> bool:
    """Python's bool or numpy's (the Meter's own summaries may hold numpy scalars)."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def _reject(value: Any, options: tuple[Any, ...], path: str) -> Any:
    raise RunFolderError(f"{path} is {_shown(value)}, expected {_expected(options)}")


def _expected(options: tuple[Any, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "text", bool: "true or false",
             dict: "an object", list: "a list", type(None): "null"}
    said = []
    for option in options:
        origin = typing.get_origin(option) or option
        if origin is typing.Literal:
            said.append("one of " + ", ".join(map(repr, typing.get_args(option))))
        else:
            said.append(names.get(origin, getattr(origin, "__name__", str(origin))))
    return " or ".join(said)
