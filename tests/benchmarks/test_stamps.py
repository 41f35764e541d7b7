"""Client stamps against the fake server's write log (``stamps.py``): per-token errors,
TTFT and ITL errors, the server's lateness and coalescing, by hand."""

from __future__ import annotations

import stamps

MS = 1_000_000


def test_errors_of_a_request_with_one_coalesced_stamp() -> None:
    # The server started at 50 ms with ITL 10 ms and wrote at 50, 61 (1 ms late), 70 ms. The
    # client stamped token 0 at 50.2 ms, then read tokens 1 and 2 together at 70.5 ms (one
    # stamp carrying 2 tokens). Token errors: 0.2, 9.5, 0.5 ms; TTFT error 0.2 ms; ITL errors
    # (client gap − server gap): 9.5 − 0.2 = 9.3 and 0.5 − 9.5 = −9.0 ms; lateness 0, 1, 0.
    request = {"stamps_ns": [50.2 * MS, 70.5 * MS, 70.5 * MS], "stamp_tokens": [1, 2]}
    log = {"writes_ns": [50 * MS, 61 * MS, 70 * MS], "start_ns": 50 * MS, "itl_ns": 10 * MS}
    e = stamps.request_errors(request, log)
    assert e is not None
    assert [round(x, 6) for x in e["token"]] == [0.2, 9.5, 0.5]
    assert round(e["ttft"], 6) == 0.2
    assert [round(x, 6) for x in e["itl"]] == [9.3, -9.0]
    assert e["lateness"] == [0.0, 1.0, 0.0]
    assert (e["coalesced"], e["stamps"]) == (1, 2)


def test_a_request_whose_stamps_do_not_match_the_log_is_left_out() -> None:
    request = {"stamps_ns": [1.0, 2.0], "stamp_tokens": [1, 1]}
    assert stamps.request_errors(request, {"writes_ns": [1], "start_ns": 0, "itl_ns": 0}) is None
    assert stamps.request_errors(request, {"start_ns": 0, "itl_ns": 0}) is None
