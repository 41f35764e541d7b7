"""``Retry-After`` values: parsing an upstream's, formatting the gateway's (pure, no clock).

RFC 9110 section 10.2.3: ``Retry-After = HTTP-date / delay-seconds``, where delay-seconds is
``1*DIGIT`` (a non-negative decimal integer of seconds) and an HTTP-date (section 5.6.7: the
IMF-fixdate and the obsolete RFC 850 and asctime forms, all in GMT) is the time after which to
retry. The gateway never forwards a value it cannot parse: an invalid or negative value is
dropped, a date in the past means "now" (0 s), and a valid value is re-written as whole
delay-seconds, so the client never has to compare its clock with the upstream's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

#: Upper bound on any wait (s): one day. An absurd but well-formed value (``9`` * 400) must not
#: overflow float arithmetic or hold a client off for years.
MAX_RETRY_AFTER_S = 86_400.0


def parse_retry_after(value: str, now: datetime) -> float | None:
    """Seconds to wait (0 to :data:`MAX_RETRY_AFTER_S`) that ``value`` asks for, or ``None``.

    ``value`` is one ``Retry-After`` field value; ``now`` is the current wall-clock time (an
    aware datetime; a naive one is taken as UTC), against which an HTTP-date is measured.
    Returns ``None`` for anything RFC 9110 does not allow: empty, signed or fractional numbers
    (``-5``, ``+5``, ``1.5``), words (``abc``), impossible dates. A past date gives 0.0.
    """
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # delay-seconds = 1*DIGIT
        if len(text) > 9:  # more than 31 years; also keeps int() clear of its digit limit
            return MAX_RETRY_AFTER_S
        return min(float(int(text)), MAX_RETRY_AFTER_S)
    if text[0] in "+-" or text[0].isdigit():
        return None  # a signed or fractional number is not an HTTP-date either
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" and asctime dates carry no zone; HTTP-dates are GMT
        when = when.replace(tzinfo=UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return min(max((when - now).total_seconds(), 0.0), MAX_RETRY_AFTER_S)


def format_retry_after(wait_s: float, minimum_s: int = 0) -> str:
    """``wait_s`` (s, >= 0) as delay-seconds: rounded up to whole seconds, >= ``minimum_s``."""
    return str(max(minimum_s, math.ceil(min(wait_s, MAX_RETRY_AFTER_S))))
