"""User headers: framing and hop-by-hop headers, control characters and oversize refused,
with a reason that names the header and never quotes its value."""

from __future__ import annotations

import pytest

from server.net.headers import (
    HEADER_MAX_BYTES,
    HEADERS_MAX_BYTES,
    check_user_headers,
    header_problem,
)


@pytest.mark.parametrize(
    "name",
    ["Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
     "Proxy-Authorization", "Proxy-Anything", "transfer-encoding"],
)  # fmt: skip
def test_hop_by_hop_headers_are_refused(name: str) -> None:
    assert header_problem(name, "x") == (
        f"header {name} is hop-by-hop (it describes one connection): it is not sent"
    )


@pytest.mark.parametrize(
    "name",
    ["Content-Length", "Host", "Expect", "Content-Type", "Content-Encoding", "Accept-Encoding"],
)
def test_headers_the_client_sets_itself_are_refused(name: str) -> None:
    assert header_problem(name, "5") == (
        f"header {name} is set by the client itself (framing or coding of the request)"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [("a\rb", "\\x0d"), ("a\nb", "\\x0a"), ("a\x00b", "\\x00"), ("a\x1bb", "\\x1b"),
     ("a\x7fb", "\\x7f"), ("caf\xe9", "\\xe9"), ("\u2028", "\\u2028")],
)  # fmt: skip
def test_control_characters_and_non_ascii_are_refused_by_code(value: str, shown: str) -> None:
    problem = header_problem("X-Secret", value)
    assert problem is not None and problem.startswith(f"header X-Secret: its value holds {shown};")
    assert value not in problem


def test_tabs_and_spaces_inside_a_value_are_kept() -> None:
    assert header_problem("X-Trace", "a b\tc") is None


def test_a_name_must_be_an_http_token() -> None:
    assert header_problem("X Trace", "1") is not None
    assert header_problem("X:Trace", "1") is not None
    assert header_problem("", "1") is not None


def test_sizes_are_bounded_per_header_and_in_total() -> None:
    # "X-A" is 3 bytes: a value of 4,093 bytes is the largest header (4,096 bytes).
    assert header_problem("X-A", "v" * (HEADER_MAX_BYTES - 3)) is None
    assert header_problem("X-A", "v" * (HEADER_MAX_BYTES - 2)) == (
        "header X-A is 4,097 bytes, name and value; at most 4,096"
    )
    # Two headers of 3 + 4,093 bytes, + 4 each for ": " and CRLF: 8,200 > 8,192.
    pair = [("X-A", "v" * 4093), ("X-B", "v" * 4093)]
    with pytest.raises(ValueError, match=f"8,200 bytes together .* at most {HEADERS_MAX_BYTES:,}"):
        check_user_headers(pair)
    check_user_headers([("X-A", "v" * 4093), ("X-B", "v" * 4085)])  # 8,192: at the limit


def test_a_name_given_twice_is_refused_whatever_its_case() -> None:
    with pytest.raises(ValueError, match="header x-trace is given twice"):
        check_user_headers([("X-Trace", "1"), ("x-trace", "2")])
