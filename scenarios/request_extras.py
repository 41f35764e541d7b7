"""What a user adds to every request: ``--header`` and ``--extra-body``, checked before anything
starts, and as run files record them.

Headers follow ``server.net.headers`` (no hop-by-hop or framing headers, no control
characters, bounded sizes, no name twice). The extra body is one JSON object of at most
:data:`EXTRA_BODY_MAX_BYTES`, with finite numbers only (``NaN`` and ``Infinity`` are not JSON),
that may not set what the plan sets (:data:`PLAN_BODY_FIELDS`: the records would blame the
server for a difference the user asked for) nor change what one streamed response carries
(:data:`SHAPE_FIELDS`); with ``ignore_eos`` it may not stop outputs early either
(:data:`EARLY_STOP_FIELDS`). Credentials in either are kept for sending and written redacted
(``server.net.credentials``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from server.net.credentials import redact_fields, redact_header_value
from server.net.headers import check_user_headers
from server.net.json_text import decode_error_text, loads_strict

#: Body fields the request builder (``loadgen.client.completion_body``) sets from the plan:
#: the model, the prompt (text or token IDs to ``/v1/completions``, messages to chat), the
#: output length, ``ignore_eos``, streaming with running usage, and the sampling (greedy
#: ``temperature`` unless the plan says otherwise).
PLAN_BODY_FIELDS: frozenset[str] = frozenset(
    {
        "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "ignore_eos",
        "stream", "stream_options", "temperature",
    }
)  # fmt: skip
#: Body fields that change what one streamed response carries: several choices (``n``,
#: ``best_of``) or the prompt echoed into the output (``echo``); the records count one choice
#: of generated tokens.
SHAPE_FIELDS: frozenset[str] = frozenset({"n", "best_of", "echo"})
#: Body fields that end an output before ``max_tokens`` even with ``ignore_eos``: a plan that
#: asks for exact output lengths cannot take them (``--no-ignore-eos`` can).
EARLY_STOP_FIELDS: frozenset[str] = frozenset({"stop", "stop_token_ids"})
#: Largest ``--extra-body`` (64 KiB = 65,536 bytes of UTF-8 JSON): it is sent with every
#: request and copied into every phase of the plan; sampling options are a few hundred bytes.
EXTRA_BODY_MAX_BYTES = 65536


def parse_header(text: str) -> tuple[str, str]:
    """``"X-Key: value"`` → ("X-Key", "value") (spaces around the name and value dropped).

    Raises:
        ValueError: no colon, or a header ``server.net.headers`` refuses; the message
            names the header, never its value.
    """
    name, sep, value = text.partition(":")
    name, value = name.strip(" \t"), value.strip(" \t")
    if not sep or not name:
        raise ValueError("a header is NAME:VALUE, e.g. 'X-Priority: 1' (one had no name or colon)")
    check_user_headers([(name, value)])
    return name, value


def parse_headers(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Every ``--header`` as (name, value) pairs, checked one by one and together.

    Raises:
        ValueError: a header is malformed or refused, a name repeats, or the headers
            together are too large (``server.net.headers.check_user_headers``).
    """
    pairs = tuple(parse_header(t) for t in texts)
    check_user_headers(pairs)
    return pairs


def parse_extra_body(text: str) -> dict[str, Any]:
    """The ``--extra-body`` JSON object.

    Raises:
        ValueError: larger than :data:`EXTRA_BODY_MAX_BYTES`, not JSON, nested too deeply to
            read, holding ``NaN``, ``Infinity`` or a number beyond a float (``1e999``), a key
            given twice (``server.net.json_text.loads_strict``), not an object, or setting a
            field the plan
            owns (:func:`owned_field_problem`, without the ``ignore_eos`` rule, which needs the
            plan's setting).
    """
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > EXTRA_BODY_MAX_BYTES:
        raise ValueError(f"is {size:,} bytes; at most {EXTRA_BODY_MAX_BYTES:,}")
    try:
        obj = loads_strict(text)
    except RecursionError:
        raise ValueError("is nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {decode_error_text(exc, f'character {exc.pos}')}") from None
    if not isinstance(obj, dict):
        raise ValueError("must be a JSON object")
    problem = owned_field_problem(obj, ignore_eos=False)
    if problem is not None:
        raise ValueError(problem)
    return obj


#: What sets each plan-owned field, named in the refusal.
_OWNER = {
    "model": "the served model, --model",
    "prompt": "the prompts, --input-len or --dataset",
    "messages": "the chat prompts, --dataset",
    "max_tokens": "the output length, --output-len",
    "max_completion_tokens": "the output length, --output-len",
    "ignore_eos": "--ignore-eos / --no-ignore-eos",
    "stream": "the client always streams",
    "stream_options": "the client always asks for running usage",
    "temperature": "--temperature",
}


def owned_field_problem(extra: Mapping[str, Any], ignore_eos: bool) -> str | None:
    """Why ``extra`` may not be merged into the plan's bodies, else ``None``: the first field
    (in the body's order) that the plan sets, that changes a response's shape, or, with
    ``ignore_eos``, that stops outputs early."""
    for field in extra:
        if field in PLAN_BODY_FIELDS:
            return f"may not set {field!r}: the plan sets it ({_OWNER.get(field, 'the client')})"
        if field in SHAPE_FIELDS:
            return (
                f"may not set {field!r}: it changes what one response carries, and the records "
                "count one choice of generated tokens"
            )
        if ignore_eos and field in EARLY_STOP_FIELDS:
            return (
                f"may not set {field!r} with ignore_eos: it ends outputs early, and the plan "
                "asks for exact output lengths (give --no-ignore-eos to use it)"
            )
    return None


def recorded_headers(headers: Sequence[tuple[str, str]]) -> list[list[str]]:
    """``headers`` as run files hold them: credential values replaced by ``<redacted>``."""
    return [[name, redact_header_value(name, value)] for name, value in headers]


def recorded_extra_body(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` as run files hold it: the value of every credential key, at any depth,
    replaced by ``<redacted>`` (``server.net.credentials.redact_fields``)."""
    out: dict[str, Any] = redact_fields(dict(extra))
    return out
