"""JSON text that is JSON: never ``NaN`` or ``Infinity``, which ``json.dumps`` writes by default
and every strict reader (browsers, ``jq``, msgspec, Go, Rust) refuses.

Computed figures that have no value (a mean of nothing) become ``null`` before they are
written (:func:`finite_or_none`); a non-finite value that reaches :func:`dumps` anyway is a
value nothing checked, refused with its place named (:class:`NonFiniteValue`).
"""

from __future__ import annotations

import json
import math
from typing import Any


class NonFiniteValue(ValueError):
    """A NaN or ±Infinity on its way into JSON; the message names where it sits
    (``"summary.peak_rate_per_s is nan"``)."""


def finite_or_none(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, scalars) with every NaN or ±Infinity replaced
    by ``None`` and numpy scalars made Python ones; dict keys become strings."""
    if isinstance(obj, dict):
        return {str(k): finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_none(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def non_finite_place(obj: Any) -> str | None:
    """Where the first NaN or ±Infinity of ``obj`` sits (``"a.b[2]"``; ``""`` for ``obj``
    itself), else ``None``. Iterative: no nesting depth exhausts the stack."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        place, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return place
        if isinstance(value, dict):
            items = [(f"{place}.{k}" if place else str(k), v) for k, v in value.items()]
            stack.extend(reversed(items))
        elif isinstance(value, list | tuple):
            stack.extend(reversed([(f"{place}[{i}]", v) for i, v in enumerate(value)]))
    return None


def dumps(obj: Any, what: str, **kwargs: Any) -> str:
    """``json.dumps(obj, **kwargs)`` that refuses NaN and ±Infinity (``allow_nan=False``).

    Raises:
        NonFiniteValue: ``obj`` holds one; the message names ``what`` (a file, an output)
            and the value's place.
        TypeError: a value JSON cannot encode (as ``json.dumps``).
    """
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        place = non_finite_place(obj)
        if place is None:
            raise
        shown = f" at {place}" if place else ""
        raise NonFiniteValue(
            f"{what}: a value{shown} is not a finite number, and JSON has no NaN or Infinity"
        ) from None


def decode_error_text(exc: json.JSONDecodeError, place: str) -> str:
    """Why ``exc`` refused the text, with ``place`` (``"column 18"``, ``"character 17"``) said
    once: json's "Unterminated string starting at" already ends in "at" ("Unterminated string
    starting at column 18"); every other reason gets one ("Expecting value at column 1")."""
    joint = " " if exc.msg.endswith(" at") else " at "
    return f"{exc.msg}{joint}{place}"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number: give a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf: as non-JSON as the literal Infinity
        raise ValueError(f"{text} is beyond the largest finite number: give a finite number")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # json.loads would keep the last silently; which one was meant?
            raise ValueError(f"key {key!r} is given twice")
        out[key] = value
    return out


def loads_strict(text: str) -> Any:
    """JSON a user wrote (a flag's value, a config file), read as a strict reader would:
    ``NaN``/``Infinity`` literals, numbers that overflow a float (``1e999``) and an object
    key given twice are refused.

    Raises:
        ValueError: any of those (the message names the number or key), or not JSON
            (``json.JSONDecodeError``); ``RecursionError`` when nested too deeply to read.
    """
    return json.loads(
        text,
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
        object_pairs_hook=_unique_keys,
    )
