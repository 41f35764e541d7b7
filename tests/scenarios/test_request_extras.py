"""``--extra-body`` and ``--header`` checked before anything starts: plan-owned fields,
non-finite numbers, sizes and depth refused with one line naming the field."""

from __future__ import annotations

import json

import pytest

from loadgen.client import completion_body
from scenarios.request_extras import (
    EXTRA_BODY_MAX_BYTES,
    PLAN_BODY_FIELDS,
    owned_field_problem,
    parse_extra_body,
    parse_header,
    parse_headers,
    recorded_extra_body,
    recorded_headers,
)
from scenarios.requests import PlannedRequest


def _requests() -> list[PlannedRequest]:
    """One request of every shape the builder knows: token IDs, text, chat; with and without
    ignore_eos."""
    return [
        PlannedRequest(request_id="r", prompt_token_ids=(1, 2), max_tokens=3),
        PlannedRequest(
            request_id="r", prompt_token_ids=(), max_tokens=3, prompt_text="hi", ignore_eos=False
        ),
        PlannedRequest(
            request_id="r",
            prompt_token_ids=(),
            max_tokens=3,
            endpoint="chat",
            messages=(("user", "hi"),),
        ),
    ]


def test_the_plan_owned_fields_are_every_field_the_body_builder_sets() -> None:
    # The refusal and the builder cannot drift apart: whatever completion_body sets without
    # an extra body is in PLAN_BODY_FIELDS, and every field there is set by some request.
    built = [set(completion_body(r, "m")) for r in _requests()]
    assert set().union(*built) == PLAN_BODY_FIELDS


@pytest.mark.parametrize("field", sorted(PLAN_BODY_FIELDS))
def test_an_extra_body_may_not_set_a_plan_owned_field(field: str) -> None:
    with pytest.raises(ValueError, match=f"^may not set '{field}': the plan sets it"):
        parse_extra_body(json.dumps({"priority": 1, field: 30}))


def test_the_refusal_names_the_flag_that_sets_the_field() -> None:
    assert owned_field_problem({"max_tokens": 30}, ignore_eos=True) == (
        "may not set 'max_tokens': the plan sets it (the output length, --output-len)"
    )


@pytest.mark.parametrize("field", ["n", "best_of", "echo"])
def test_fields_that_change_a_responses_shape_are_refused(field: str) -> None:
    problem = owned_field_problem({field: 2}, ignore_eos=False)
    assert problem is not None and problem.startswith(f"may not set {field!r}: it changes")


def test_stop_fields_are_refused_only_with_ignore_eos() -> None:
    assert owned_field_problem({"stop": ["x"]}, ignore_eos=False) is None
    problem = owned_field_problem({"stop_token_ids": [2]}, ignore_eos=True)
    assert problem is not None and "give --no-ignore-eos to use it" in problem


def test_a_plan_field_in_a_planned_request_never_reaches_the_body() -> None:
    # Even a request built by hand, past the refusal, sends the plan's values.
    planned = PlannedRequest(
        request_id="r", prompt_token_ids=(1,), max_tokens=3, ignore_eos=False,
        extra_body={"max_tokens": 30, "ignore_eos": True, "stream": False, "priority": 2},
    )  # fmt: skip
    body = completion_body(planned, "m")
    assert (body["max_tokens"], body["stream"], body["priority"]) == (3, True, 2)
    assert "ignore_eos" not in body


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"top_p": NaN}', "NaN is not a JSON number: give a finite number"),
        ('{"top_p": Infinity}', "Infinity is not a JSON number"),
        ('{"top_p": -Infinity}', "-Infinity is not a JSON number"),
        # 1e999 overflows a float to inf: the same non-number, spelled as a number
        ('{"priority": 1e999}', "1e999 is beyond the largest finite number"),
        ('{"a": {"b": [-1E+400]}}', "-1E.400 is beyond the largest finite number"),
        ('{"top_p": 0.5, "top_p": 0.9}', "key 'top_p' is given twice"),
        ("[1]", "must be a JSON object"),
        ('{"a": ', "not JSON: Expecting value at character 6$"),
        # json's reason ends in "at": the place follows it once (the quote is character 6).
        ('{"a": "x', "not JSON: Unterminated string starting at character 6$"),
        ("[" * 100_000, "is nested too deeply to read"),
    ],
)
def test_an_extra_body_that_is_not_a_finite_json_object_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{why.replace('(', '.').replace(')', '.')}"):
        parse_extra_body(text[: EXTRA_BODY_MAX_BYTES - 1])


def test_an_extra_body_is_bounded_in_bytes() -> None:
    # {"x": "…"} is 9 bytes around the value ('{"x": "' and '"}'): a value of 65,527 bytes
    # makes exactly 64 KiB, one more byte is refused.
    assert parse_extra_body(json.dumps({"x": "v" * (EXTRA_BODY_MAX_BYTES - 9)}))
    with pytest.raises(ValueError, match=r"^is 65,537 bytes; at most 65,536$"):
        parse_extra_body(json.dumps({"x": "v" * (EXTRA_BODY_MAX_BYTES - 8)}))


def test_headers_are_parsed_and_checked_together() -> None:
    assert parse_header("  X-Trace :  a b ") == ("X-Trace", "a b")
    with pytest.raises(ValueError, match="a header is NAME:VALUE"):
        parse_header("Authorization Bearer sekrit")
    with pytest.raises(ValueError, match="is given twice"):
        parse_headers(["X-A: 1", "x-a: 2"])
    with pytest.raises(ValueError) as info:
        parse_header("X-Key: sekrit\r\nContent-Length: 5")
    assert "sekrit" not in str(info.value)


def test_records_hold_credentials_redacted() -> None:
    assert recorded_headers([("X-JWT", "j"), ("X-Trace", "t")]) == [
        ["X-JWT", "<redacted>"], ["X-Trace", "t"],
    ]  # fmt: skip
    assert recorded_extra_body({"vllm_xargs": {"api_key": "k"}, "top_p": 0.5}) == {
        "vllm_xargs": {"api_key": "<redacted>"}, "top_p": 0.5,
    }  # fmt: skip
