"""Numbers typed on the command line, each read by ONE parser with one set of rules: sizes,
durations, rates, speedups, concurrencies, fractions, percentiles, SLOs and comma-separated
lists of them.

Every value is finite (``nan``, ``inf`` and digits that overflow a float are refused) and
inside its range (:class:`Range`, whose bounds say why they are there); a list repeats no
value (two equal values would make two phases, cases or fields of one name); an error is one
line naming what the user typed. The ``…Text`` annotated types validate the text a scenario
parameter keeps (the plan records what the user typed; the scenario reads it again with the
same function), so a bad value fails on the command line, naming its flag
(``server.cli_options``), before any run directory exists.

:func:`exact_label` names a phase or a field after a number so that two different numbers
never get one name (``0.1`` and ``0.1000001`` are ``0.1`` and ``0.1000001``, not both
``0.1``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator

from scenarios.common import (
    MAX_CONCURRENCY,
    MAX_RATE_FRACTION,
    MAX_RATE_RPS,
    MAX_RUN_S,
    MAX_SPEEDUP,
)
from server.sizes import parse_size

N = TypeVar("N", int, float)

SLO_METRICS = ("ttft", "tpot", "e2el")

# Matched against the stripped text, every run taken possessively (nothing given back): ``\s*``
# on both sides of the optional unit backtracked over each other, O(n²) in a run of spaces
# (40k spaces then a stray letter took seconds).
_DURATION = re.compile(r"(\d++(?:\.\d*+)?|\.\d++)\s*+(ms|s|m|min)?")
#: What one of each typed unit is in seconds and in milliseconds (each exact in its unit).
_SCALE = {
    "s": {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0},
    "ms": {"ms": 1.0, "s": 1e3, "m": 6e4, "min": 6e4},
}


@dataclass(frozen=True)
class Range:
    """Where a number may lie: above ``lo`` (or at it, unless ``lo_open``), below ``hi`` (or
    at it, unless ``hi_open``); ``None``: no bound on that side. ``unit`` follows the number
    in messages; ``why_lo``/``why_hi`` say why the bound is there."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    unit: str = ""
    why_lo: str = ""
    why_hi: str = ""

    def check(self, value: float, shown: str) -> None:
        """Raises ValueError ``"{shown} must be …"`` when ``value`` lies outside."""
        unit = f" {self.unit}" if self.unit else ""
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            op = ">" if self.lo_open else "≥"
            why = f" ({self.why_lo})" if self.why_lo else ""
            raise ValueError(f"{shown} must be {op} {_bound(self.lo)}{unit}{why}")
        if self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)):
            op = "<" if self.hi_open else "≤"
            why = f" ({self.why_hi})" if self.why_hi else ""
            raise ValueError(f"{shown} must be {op} {_bound(self.hi)}{unit}{why}")


def _bound(value: float) -> str:
    """A bound as a message shows it: a whole number with every digit (``1099511627776``,
    not ``1.09951e+12``), else the shortest float text."""
    if float(value).is_integer() and abs(value) < 2**63:
        return str(int(value))
    return f"{value:g}"


#: Rates and speedups have no floor but zero: how long a schedule they make is checked on the
#: plan (``scenarios.schedule``), where the figure can be given.
RATE = Range(
    lo=0,
    lo_open=True,
    hi=MAX_RATE_RPS,
    unit="req/s",
    why_hi="above it the client's send loop, not the rate, decides when requests leave",
)
SPEEDUP = Range(
    lo=0,
    lo_open=True,
    hi=MAX_SPEEDUP,
    why_hi="above it the client's send loop, not the trace, decides when requests leave",
)
CONCURRENCY = Range(
    lo=1, hi=MAX_CONCURRENCY, why_hi="requests at once: each holds a socket of the client"
)
RATE_FRACTION = Range(
    lo=0, lo_open=True, hi=MAX_RATE_FRACTION, why_hi="of the saturation throughput"
)
PERCENTILE = Range(lo=0, hi=100, lo_open=True, hi_open=True)


def exact_label(value: float, spec: str = "g") -> str:
    """``value`` formatted with ``spec`` when that text reads back as the same number, else
    its shortest exact form (``repr``): distinct numbers never share a label.
    ``exact_label(0.5, ".2f")`` = ``"0.50"``; ``exact_label(0.251, ".2f")`` = ``"0.251"``."""
    text = format(value, spec)
    return text if float(text) == value else repr(float(value))


def parse_number(text: str, what: str, kind: type[N], rng: Range = Range()) -> N:
    """``text`` as an ``int`` or a finite ``float`` inside ``rng``.

    Raises:
        ValueError: ``"{what} 'x' is not a number"`` (or ``not an integer``), ``"… is not a
            finite number"``, or the range's message.
    """
    item = text.strip()
    try:
        value = kind(item)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise ValueError(f"{what} {item!r} is not {noun}") from None
    if kind is float and not math.isfinite(value):
        raise ValueError(f"{what} {item!r} is not a finite number")
    rng.check(value, f"{what} {item}")
    return value


def list_items(text: str, what: str) -> list[str]:
    """The items of a comma-separated flag value, stripped; ``[]`` when none is given
    (``""``, ``" , "``).

    Raises:
        ValueError: an empty item (``"1,,2"``, ``"1,"``, ``",1"``): a value lost between
            commas is a typo, never silently dropped.
    """
    items = [x.strip() for x in text.split(",")]
    if not any(items):  # "" or " , ": nothing given, which the caller names
        return []
    if "" in items:
        raise ValueError(f"{what} list {text!r} has an empty item between commas")
    return items


def parse_numbers(
    text: str, what: str, kind: type[N], rng: Range = Range(), *, example: str = ""
) -> list[N]:
    """``"a,b,c"`` → the numbers in the order given (:func:`parse_number` each).

    Raises:
        ValueError: a bad item, none given, or a value given twice (``"1,1.0"`` too: equal
            values would name two phases alike).
    """
    items = list_items(text, what)
    if not items:
        raise ValueError(f"no {what} given" + (f"; e.g. {example}" if example else ""))
    values = [parse_number(item, what, kind, rng) for item in items]
    for i, value in enumerate(values):
        if value in values[:i]:
            raise ValueError(f"{what} {exact_label(value)} is given twice")
    return values


def parse_duration(
    text: str,
    *,
    unit: str = "s",
    bare: str | None = None,
    zero_ok: bool = False,
    max_s: float | None = MAX_RUN_S,
    what: str = "duration",
    example: str = "40s, 500ms, 2m",
) -> float:
    """``"40s"``, ``"500ms"``, ``"2m"`` or a bare number (in ``bare``, default ``unit``) →
    that time in ``unit`` (``"s"`` or ``"ms"``).

    Raises:
        ValueError: not a number with one of the units ms, s, m (min); not finite; negative;
            zero unless ``zero_ok``; longer than ``max_s`` seconds. Each message says which.
    """
    m = _DURATION.fullmatch(text.strip())
    typed = (m.group(2) or bare or unit) if m else unit
    value = float(m.group(1)) * _SCALE[unit][typed] if m else math.nan
    floor = "≥ 0" if zero_ok else "> 0"
    if not m and text.strip().startswith("-") and _DURATION.fullmatch(text.strip()[1:].lstrip()):
        raise ValueError(f"{text!r} is negative: a {what} must be {floor}")  # a time, but < 0
    if m and value == 0 and not zero_ok:
        raise ValueError(f"{text!r} is zero: a {what} must be > 0")
    if not m or not math.isfinite(value):
        raise ValueError(f"{text!r} is not a {what}; e.g. {example}")
    if max_s is not None and value * _SCALE["s"][unit] > max_s:
        raise ValueError(f"{text!r} is longer than {max_s:g} s ({_span(max_s)})")
    return value


def _span(seconds: float) -> str:
    return "one day" if seconds == 86400 else f"{seconds / 3600:g} h"


def parse_rates(text: str) -> list[float]:
    """``"2,4,8"`` → [2.0, 4.0, 8.0] req/s, in the order given (:data:`RATE`)."""
    return parse_numbers(text, "rate", float, RATE, example="2,4,8")


def parse_concurrencies(text: str) -> list[int]:
    """``"1,4,16"`` → [1, 4, 16], in the order given (:data:`CONCURRENCY`)."""
    return parse_numbers(text, "concurrency", int, CONCURRENCY, example="1,4,16")


def parse_speedups(text: str) -> list[float]:
    """``"0.5,1,2"`` → [0.5, 1.0, 2.0], in increasing order (:data:`SPEEDUP`)."""
    return sorted(parse_numbers(text, "speedup", float, SPEEDUP, example="1 or 0.5,1,2"))


def parse_rate_fractions(text: str) -> list[float]:
    """``"0.5,1,2"`` → fractions of a measured throughput, increasing (:data:`RATE_FRACTION`)."""
    return sorted(parse_numbers(text, "rate fraction", float, RATE_FRACTION, example="0.5,1"))


def parse_percentiles(text: str) -> list[float]:
    """``"50,90,99"`` → [50.0, 90.0, 99.0] (each in (0, 100), no repeats)."""
    return parse_numbers(text, "percentile", float, PERCENTILE, example="50,90,99")


def parse_sizes(text: str, what: str = "cache size") -> list[int]:
    """``"1GiB,4GiB"`` → [2^30, 2^32] bytes, in the order given, no size twice
    (``server.sizes.parse_size`` each: ``1GiB`` and ``1024MiB`` are one size).

    Raises:
        ValueError: an item is not a size, none given, or a size is given twice.
    """
    items = list_items(text, what)
    if not items:
        raise ValueError(f"no {what} given; e.g. 1GiB or 1GiB,4GiB")
    sizes = [parse_size(item) for item in items]
    for i, size in enumerate(sizes):
        if size in sizes[:i]:
            raise ValueError(f"{what} {items[i]} is given twice ({size} bytes)")
    return sizes


def parse_slo(text: str) -> dict[str, float]:
    """``"ttft=200ms,tpot=50ms,e2el=5s"`` → {"ttft": 200.0, "tpot": 50.0, "e2el": 5000.0} (ms).

    Raises:
        ValueError: an item is not ``METRIC=DURATION`` with METRIC one of ttft, tpot, e2el,
            a metric is given twice, or nothing is given.
    """
    out: dict[str, float] = {}
    for item in list_items(text, "SLO"):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_METRICS:
            raise ValueError(
                f"SLO item {item!r}: expected METRIC=LIMIT with METRIC one of "
                f"{', '.join(SLO_METRICS)}, e.g. ttft=200ms"
            )
        if key in out:
            raise ValueError(f"SLO {key} given twice")
        try:
            out[key] = parse_duration(value, what="limit") * 1e3
        except ValueError as exc:
            raise ValueError(f"SLO {key}: {exc}") from None
    if not out:
        raise ValueError("no SLO given; e.g. ttft=200ms,tpot=50ms")
    return out


def checked_text(parse: Callable[[str], Any]) -> AfterValidator:
    """A validator keeping the text as typed once ``parse`` accepts it."""

    def check(value: str) -> str:
        parse(value)
        return value

    return AfterValidator(check)


#: Validated text, kept as the user typed it (see the module docstring).
DurationText = Annotated[str, checked_text(parse_duration)]
RatesText = Annotated[str, checked_text(parse_rates)]
ConcurrenciesText = Annotated[str, checked_text(parse_concurrencies)]
SpeedupsText = Annotated[str, checked_text(parse_speedups)]
RateFractionsText = Annotated[str, checked_text(parse_rate_fractions)]
SizesText = Annotated[str, checked_text(parse_sizes)]
SLOText = Annotated[str, checked_text(parse_slo)]
