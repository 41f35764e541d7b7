"""``--token-scale``: every length and the block size of a trace scaled by one exact factor.

A trace made for a long-context model fits a small one while its prefix structure (which
requests share which blocks) stays the same (:func:`scale_trace`). Scaled values obey the
limits loaded ones do (``scenarios.traces.MAX_LENGTH_TOKENS``), and the scale itself is read
without expanding huge exponents.
"""

from __future__ import annotations

import math
import operator
from dataclasses import replace
from fractions import Fraction

from scenarios.traces import MAX_LENGTH_TOKENS, Trace

#: Longest token scale text, and the largest decimal exponent it may carry: ``Fraction``
#: expands ``1e9999999`` into ten million digits (it ran for minutes), while a usable scale
#: keeps a block of ≥ 1 and ≤ ``MAX_LENGTH_TOKENS`` tokens, within 10**±12 of 1.
_SCALE_MAX_CHARS = 64
_SCALE_MAX_EXPONENT = 12


def parse_token_scale(text: str) -> Fraction:
    """A token scale from the command line: ``"1/16"``, ``"0.0625"`` or ``"1"``, exactly.

    Raises:
        ValueError: not a number or a fraction, not positive, longer than 64 characters or
            with a decimal exponent beyond ±12.
    """
    shown = text if len(text) <= _SCALE_MAX_CHARS else text[:_SCALE_MAX_CHARS] + "…"
    _, e, exponent = text.strip().lower().partition("e")
    try:
        too_big = len(text) > _SCALE_MAX_CHARS or (e and abs(int(exponent)) > _SCALE_MAX_EXPONENT)
    except ValueError:
        too_big = False  # not a number: Fraction says so below
    if too_big:
        raise ValueError(
            f"invalid token scale {shown!r}: at most {_SCALE_MAX_CHARS} characters and an "
            f"exponent within ±{_SCALE_MAX_EXPONENT}, e.g. 1/16 or 0.0625"
        )
    try:
        scale = Fraction(text.strip())
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(
            f"invalid token scale {shown!r}: expected a fraction or a decimal, e.g. 1/16 or 0.0625"
        ) from exc
    if scale <= 0:
        raise ValueError(f"invalid token scale {shown!r}: must be positive")
    return scale


def _scaled_block(block_tokens: int, scale: Fraction) -> int:
    scaled = block_tokens * scale
    if scaled.denominator != 1 or scaled < 1:
        examples = [f"1/{d}" for d in (1, 2, 4, 8, 16, 32, 64) if block_tokens % d == 0]
        raise ValueError(
            f"token scale {scale} gives blocks of {block_tokens} × {scale} = {scaled} tokens; "
            f"a block must be a whole number of tokens ≥ 1: use m/{block_tokens} for a whole "
            f"m ≥ 1 (e.g. {', '.join(examples)})"
        )
    return int(scaled)


def scale_trace(trace: Trace, scale: Fraction) -> Trace:
    """Shrink (or grow) every length and the block size of ``trace`` by ``scale``.

    ``block_tokens' = block_tokens × scale`` (must be a whole number ≥ 1);
    ``input' = ceil(input × scale)``; ``output' = max(1, ceil(output × scale))``. Hash ids,
    timestamps and delays are unchanged, so the prefix structure is kept: since ``B × scale``
    is a whole number, ``ceil(ceil(input × s) / (B × s)) = ceil(input / B)`` (nested ceiling
    division by an integer), so ``len(hash_ids)`` still equals ``ceil(input' / block')``.
    Scales compose: scaling a scaled trace multiplies ``token_scale``.

    Scaled values obey the limits loaded ones do: a block, a prompt and an output of at most
    ``MAX_LENGTH_TOKENS`` tokens.

    Raises:
        ValueError: ``block_tokens × scale`` is not a whole number ≥ 1 (the message names
            the valid scales), or a scaled block or length passes ``MAX_LENGTH_TOKENS`` (the
            message names the first line and its figures).
    """
    block = _scaled_block(trace.block_tokens, scale)
    _check_scaled(trace, scale, block)
    requests = tuple(
        replace(
            r,
            input_length=math.ceil(r.input_length * scale),
            output_length=max(1, math.ceil(r.output_length * scale)),
        )
        for r in trace.requests
    )
    return replace(
        trace, block_tokens=block, requests=requests, token_scale=trace.token_scale * scale
    )


def _check_scaled(trace: Trace, scale: Fraction, block: int) -> None:
    """Refuse a scale that takes a block or a request's length past ``MAX_LENGTH_TOKENS``."""
    line, length = max(
        ((r.line, max(r.input_length, r.output_length)) for r in trace.requests),
        key=operator.itemgetter(1),
    )
    scaled = math.ceil(length * scale)
    if max(block, scaled) > MAX_LENGTH_TOKENS:
        raise ValueError(
            f"{trace.path}:{line}: token scale {scale} makes its {length:,} tokens {scaled:,} "
            f"and a block {block:,} tokens; at most {MAX_LENGTH_TOKENS:,}: lower --token-scale"
        )
