"""JSON text never holds NaN or Infinity: computed gaps become null, unchecked values refused."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from server.net.json_text import (
    NonFiniteValue,
    decode_error_text,
    dumps,
    finite_or_none,
    loads_strict,
    non_finite_place,
)


def test_finite_json_is_written_as_json_dumps_writes_it() -> None:
    obj = {"a": [1, 2.5, None], "b": {"c": "x"}}
    assert dumps(obj, "out", indent=2) == json.dumps(obj, indent=2)


@pytest.mark.parametrize(
    ("obj", "place"),
    [
        ({"summary": {"peak_rate_per_s": math.nan}}, "summary.peak_rate_per_s"),
        ({"points": [1.0, {"x": math.inf}]}, "points[1].x"),
        ([-math.inf], "[0]"),
        (np.float64("nan"), ""),
    ],
)
def test_a_non_finite_value_is_refused_with_its_place(obj: object, place: str) -> None:
    assert non_finite_place(obj) == place
    shown = f" at {place}" if place else ""
    with pytest.raises(NonFiniteValue) as info:
        dumps(obj, "--json")
    assert str(info.value) == (
        f"--json: a value{shown} is not a finite number, and JSON has no NaN or Infinity"
    )


def test_computed_gaps_become_null() -> None:
    cleaned = finite_or_none({"a": math.nan, 1: [np.float64(2.0), math.inf], "b": (3,)})
    assert cleaned == {"a": None, "1": [2.0, None], "b": [3]}
    assert type(cleaned["1"][0]) is float  # numpy scalars become Python ones
    assert dumps(cleaned, "out") == '{"a": null, "1": [2.0, null], "b": [3]}'


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("NaN", "NaN is not a JSON number"),
        ('{"x": [1, -Infinity]}', "-Infinity is not a JSON number"),
        ("1e309", "1e309 is beyond the largest finite number"),  # float max is ~1.8e308
        ('{"a": 1, "b": {"c": 2, "c": 3}}', "key 'c' is given twice"),
    ],
)
def test_strict_json_refuses_non_numbers_overflow_and_repeated_keys(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{why}"):
        loads_strict(text)


def test_strict_json_reads_what_json_allows() -> None:
    # the largest double still reads, and the same key in two objects is no repetition
    assert loads_strict('{"a": {"k": 1.7976931348623157e308}, "b": {"k": -0.0}}') == {
        "a": {"k": 1.7976931348623157e308}, "b": {"k": -0.0}
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # json's own reason ends in "at": the place is said once, never "at at".
        ('{"a": "x', "Unterminated string starting at column 7"),
        ("[1,]", "Expecting value at column 4"),
        ("1 2", "Extra data at column 3"),
    ],
)
def test_a_decode_error_names_its_place_once(text: str, why: str) -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(text)
    assert decode_error_text(info.value, f"column {info.value.colno}") == why
