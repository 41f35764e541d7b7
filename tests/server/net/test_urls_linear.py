"""URL password redaction runs in time linear in its text, with the plain pattern's matches.

Every run file and console line passes through ``redact_urls_in``; the plain pattern
``[A-Za-z][A-Za-z0-9+.-]*://…`` restarted at every letter of a long run and cost O(n²) (40k
letters ≈ 2.9 s a call, so a 100 KB header value cost minutes before the first request).
The timing is a ratio against a linear scan of the same string measured in the same test,
not a fixed number of seconds, so a slow or busy machine does not fail it.
"""

from __future__ import annotations

import random
import re

import pytest

from server.net.urls import MASK, redact_urls_in
from tests.support.timing import times_a_linear_scan

MB = 2**20

#: The pattern as it was (quadratic): the reference for what is matched, on short strings.
_PLAIN = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s'\"]+)@")


def _plain_redaction(text: str) -> str:
    def masked(m: re.Match[str]) -> str:
        user, sep, _ = m["info"].partition(":")
        return f"{m['scheme']}{user}:{MASK}@" if sep else f"{m['scheme']}{MASK}@"

    return _PLAIN.sub(masked, text)


@pytest.mark.parametrize(
    "text",
    [
        "a" * MB,  # one run of letters: the case that was quadratic
        "a1" * (MB // 2),  # letters after digits: every other position may start a scheme
        "http://" * (MB // 7),  # a scheme start every 7 characters, no user information
        "http://u:pw@h " * (MB // 14),  # a password every 14 characters
    ],
    ids=["letters", "letters-and-digits", "schemes", "passwords"],
)
def test_a_megabyte_is_redacted_in_linear_time(text: str) -> None:
    # The redaction costs at most about ten linear scans of its text (a '://' every 7
    # characters: 150k of them, each a few string calls; ≈ 0.01 scans for text without one;
    # AMD EPYC); quadratic work on 1 MB is thousands of scans (≈ 1,800 s at 2.9 s per 40k
    # letters), so 25× leaves room for noise and none for a quadratic pattern.
    ratio = times_a_linear_scan(redact_urls_in, text)
    assert ratio < 25, f"redacting costs {ratio:.1f} linear scans"


def test_the_same_urls_are_redacted_as_by_the_plain_pattern() -> None:
    rng = random.Random(7)
    alphabet = "ab1+.-:/@ \"'"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        text = text.replace("b1", "http://") if rng.random() < 0.5 else text
        assert redact_urls_in(text) == _plain_redaction(text), text


def test_a_scheme_after_digits_or_signs_is_still_found() -> None:
    # The scheme starts at the first letter of its run; what precedes it is kept as written.
    assert redact_urls_in("1http://u:pw@h") == "1http://u:***@h"
    assert redact_urls_in("-+.9git+ssh://tok@h/x") == "-+.9git+ssh://***@h/x"
    assert redact_urls_in("x=a1http://u:pw@h") == "x=a1http://u:***@h"
