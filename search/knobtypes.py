"""What a knob's value may be: does a value fit a type annotation (the subset of typing that
algorithm knobs use: int, float, bool, str, Sequence[str], Mapping, X | None, ...; an int is a
float, a bool is not an int), an annotation in words for error messages, and the base of a
knob group (several knobs in one object). search.knobs checks knobs with these; this module
imports nothing of the project, so the objects that are groups can derive from Group."""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Mapping
from typing import Any


class Group:
    """Base of a knob group: a frozen dataclass whose init fields are knobs by their own names
    (search.knobs' module doc)."""

    __slots__ = ()


def _members(tp: Any) -> tuple[Any, ...]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


def conforms(value: Any, tp: Any) -> bool:
    """Does value fit the annotation tp (the subset of typing that knobs use)?"""
    if len(members := _members(tp)) > 1:
        return any(conforms(value, m) for m in members)
    if tp is Any:
        return True
    if tp is None or tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (collections.abc.Sequence, list, tuple):
        return isinstance(value, (list, tuple)) and all(conforms(v, args[0]) for v in value) \
            if args else isinstance(value, (list, tuple))
    if origin in (collections.abc.Mapping, dict):
        return isinstance(value, Mapping)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # an annotation this checker does not model


def describe(tp: Any) -> str:
    """An annotation in words: "an int", "a number", "a list of strings or None"."""
    words = {bool: "true or false", int: "an int", float: "a number", str: "a string",
             type(None): "None"}
    parts = []
    for m in _members(tp):
        origin, args = typing.get_origin(m), typing.get_args(m)
        if m in words:
            parts.append(words[m])
        elif origin in (collections.abc.Sequence, list, tuple):
            parts.append(f"a list of {describe(args[0]).removeprefix('a ').removeprefix('an ')}s"
                         if args else "a list")
        elif origin in (collections.abc.Mapping, dict):
            parts.append("a mapping")
        else:
            parts.append(getattr(m, "__name__", str(m)))
    return " or ".join(parts)
