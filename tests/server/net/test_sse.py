"""server.net.sse: the one SSE decoder (the client's and the gateway's), per the WHATWG rules.

Every expected event list is written out by hand from its stream. A stream is decoded whole,
byte by byte and cut at every byte into two reads, the way the client reads (its fast path
first) and the way the gateway reads (``feed`` only); all must give the same events.
"""

from __future__ import annotations

import pytest

from server.net.sse import DONE, SSEDecoder, SSEEvent, SSELineTooLong

pytestmark = pytest.mark.timeout(30)

TOKEN = '{"choices":[{"index":0,"text":"~","finish_reason":null}],"usage":{"completion_tokens":1}}'
TRAILER = '{"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":4}}'
BOM = "\ufeff".encode()  # b"\xef\xbb\xbf"


def decode_reads(reads: list[bytes], max_line_bytes: int = 1024) -> list[SSEEvent]:
    """What the gateway does: ``feed`` every read, then ``end``."""
    decoder = SSEDecoder(max_line_bytes)
    out = [event for raw in reads for event in decoder.feed(raw)]
    decoder.end()
    return out


def decode_like_the_client(reads: list[bytes]) -> list[SSEEvent]:
    """What ``loadgen.client`` does per read: the fast path, else the general one."""
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    for raw in reads:
        plain = decoder.feed_plain(raw)
        out += decoder.feed(raw) if plain is None else [SSEEvent(d) for d in plain]
    decoder.end()
    return out


def every_split(stream: bytes) -> list[list[bytes]]:
    """The stream whole, byte by byte, and cut in two at every byte (CRLF halves included)."""
    splits = [[stream], [stream[i : i + 1] for i in range(len(stream))]]
    return splits + [[stream[:cut], stream[cut:]] for cut in range(len(stream) + 1)]


def assert_every_split(stream: bytes, expected: list[SSEEvent]) -> None:
    for reads in every_split(stream):
        assert decode_reads(reads) == expected, reads
        assert decode_like_the_client(reads) == expected, reads


# -- the rules, one at a time -------------------------------------------------------------------


def test_events_end_at_blank_lines() -> None:
    stream = f"data: {TOKEN}\n\ndata: {TRAILER}\n\ndata: [DONE]\n\n".encode()
    assert_every_split(stream, [SSEEvent(TOKEN), SSEEvent(TRAILER), SSEEvent(DONE)])


def test_data_lines_of_one_event_are_joined_with_newlines() -> None:
    # "data:second" has no space to drop; "data:  third" keeps one of its two.
    stream = b"data: first\ndata:second\ndata:  third\n\n"
    assert_every_split(stream, [SSEEvent("first\nsecond\n third")])


def test_comments_ids_retries_and_unknown_fields_are_ignored() -> None:
    stream = b": keep-alive\nevent: message\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n"
    assert_every_split(stream, [SSEEvent("x")])


def test_blank_lines_and_events_without_data_dispatch_nothing() -> None:
    stream = b"\n\r\n: ping\n\nevent: ping\n\ndata: x\n\n"
    assert_every_split(stream, [SSEEvent("x")])  # the "ping" type is not carried over


def test_the_event_type_is_kept_and_reset_after_each_event() -> None:
    stream = b"event: error\ndata: upstream timed out\n\ndata: [DONE]\n\n"
    assert_every_split(stream, [SSEEvent("upstream timed out", "error"), SSEEvent(DONE)])


def test_a_character_split_across_reads_is_decoded_whole() -> None:
    encoded = 'data: {"text":"é"}\n\n'.encode()  # é is two bytes: c3 a9
    assert_every_split(encoded, [SSEEvent('{"text":"é"}')])


def test_feed_line_takes_whole_lines_with_or_without_their_line_end() -> None:
    decoder = SSEDecoder()
    lines: list[bytes | str] = [b"data: a\r\n", "data: b", b"\n"]
    assert [decoder.feed_line(line) for line in lines] == [None, None, SSEEvent("a\nb")]


# -- line ends: LF, CRLF and a bare CR ------------------------------------------------------------

# A stream of every kind the fast path declines between plain events: CRLF, an event type, a
# comment, multi-line data, "data:" without a space, a bare CR; written out by hand below.
MIXED = (
    f"data: {TOKEN}\n\ndata: {TOKEN}\n\n"
    "data: a\r\n\r\n"
    "event: error\ndata: boom\n\n"
    ": ping\n\ndata: b\n\n"
    "data: c1\ndata: c2\n\n"
    "data:d\n\n"
    'data: {"error":{"message":"x","code":500}}\r\r'
    f"data: {TRAILER}\n\ndata: [DONE]\n\n"
).encode()
MIXED_EVENTS = [
    SSEEvent(TOKEN),
    SSEEvent(TOKEN),
    SSEEvent("a"),
    SSEEvent("boom", "error"),
    SSEEvent("b"),
    SSEEvent("c1\nc2"),
    SSEEvent("d"),
    SSEEvent('{"error":{"message":"x","code":500}}'),
    SSEEvent(TRAILER),
    SSEEvent(DONE),
]


def test_plain_and_other_events_come_out_the_same_for_every_split() -> None:
    assert_every_split(MIXED, MIXED_EVENTS)


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_every_line_end_gives_the_same_events(eol: str) -> None:
    stream = eol.join(["data: a", "", ": ping", "data: b1", "data: b2", "", "data: [DONE]", ""])
    assert_every_split((stream + eol).encode(), [SSEEvent("a"), SSEEvent("b1\nb2"), SSEEvent(DONE)])


def test_a_cr_ending_one_read_and_an_lf_opening_the_next_are_one_line_end() -> None:
    decoder = SSEDecoder()
    # "data: x\r" ends the line at once; the LF that follows is not a blank line, so the
    # event is dispatched only by the blank line after it (one event, not a split one).
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\ndata: y\r\n") == []
    assert decoder.feed(b"\r\n") == [SSEEvent("x\ny")]


def test_a_bare_cr_event_is_dispatched_in_the_read_that_ends_it() -> None:
    # Not held back for a possible LF: a bare-CR stream's [DONE] is not lost at its end, and
    # the client stamps each event with the read it arrived in.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r\r") == [SSEEvent("x")]
    assert decoder.feed(b"\ndata: y\r\r") == [SSEEvent("y")]  # that LF was the CR's pair
    assert decoder.feed(b"data: [DONE]\r\r") == [SSEEvent(DONE)]


# -- the fast path ------------------------------------------------------------------------------


def test_the_fast_path_takes_plain_events_and_keeps_an_unfinished_one() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: w\n\n") == [SSEEvent("w")]  # the first read: feed's
    assert decoder.feed_plain(b"data: x\n\ndata: y\n\ndata: z") == ["x", "y"]
    assert decoder.feed_plain(b"z\n\n") == ["zz"]


def test_the_fast_path_declines_without_consuming_and_feed_takes_over() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    read = b"data: x\n\nevent: error\ndata: boom\n\n"
    assert decoder.feed_plain(read) is None
    assert decoder.feed(read) == [SSEEvent("x"), SSEEvent("boom", "error")]


def test_the_fast_path_declines_a_first_read_which_may_hold_a_byte_order_mark() -> None:
    decoder = SSEDecoder()
    assert decoder.feed_plain(b"data: x\n\n") is None
    assert decoder.feed(b"data: x\n\n") == [SSEEvent("x")]
    assert decoder.feed_plain(b"data: y\n\n") == ["y"]


# -- the byte order mark: skipped once, at the very start ------------------------------------


def test_a_byte_order_mark_at_the_start_is_skipped_for_every_split() -> None:
    assert_every_split(BOM + b"data: x\n\ndata: y\n\n", [SSEEvent("x"), SSEEvent("y")])


def test_only_the_first_byte_order_mark_is_skipped() -> None:
    # The second one opens the line: its field is "\ufeffdata", not "data", so it is ignored.
    assert_every_split(BOM + BOM + b"data: x\n\ndata: y\n\n", [SSEEvent("y")])
    # One in the middle of the stream is not skipped either.
    assert_every_split(b"data: x\n\n" + BOM + b"data: y\n\n", [SSEEvent("x")])


def test_bytes_that_only_begin_like_a_byte_order_mark_are_kept() -> None:
    # "\xef\xbb" then "!" is no BOM: the bytes stay (as a replacement character) in the field
    # name, so the line is ignored, and the next event comes through.
    assert decode_reads([b"\xef\xbb", b"!data: x\n\ndata: y\n\n"]) == [SSEEvent("y")]


# -- the end of the stream ----------------------------------------------------------------------


def test_an_event_left_unterminated_at_the_end_is_discarded_not_dispatched() -> None:
    for tail in (b"data: half", b"data: half\n", b"data: half\r\n", b"data: a\ndata: b\n"):
        decoder = SSEDecoder()
        assert decoder.feed(b"data: x\n\n" + tail) == [SSEEvent("x")]
        assert decoder.end() is True, tail  # one was discarded
        assert decoder.end() is False  # and nothing is left


@pytest.mark.parametrize("tail", [b"", b": comment", b": comment\n", b"event: e\n", b"\xef\xbb"])
def test_ending_with_no_data_line_pending_discards_no_event(tail: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(tail if tail == b"\xef\xbb" else b"data: x\n\n" + tail)
    assert decoder.end() is False


def test_a_decoder_that_ended_starts_a_new_stream() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n\ndata: cut")
    decoder.end()
    assert decoder.feed(BOM + b"data: y\n\n") == [SSEEvent("y")]  # its BOM skipped again


# -- bounds (the client's limit at every split: tests/loadgen/test_input_bounds.py) ----------


def test_an_overlong_line_or_event_raises() -> None:
    with pytest.raises(SSELineTooLong, match=r"^SSE line larger than 64 bytes$"):
        decode_reads([b"data: x\n\ndata: " + b"x" * 100], max_line_bytes=64)
    with pytest.raises(SSELineTooLong):  # many short data lines in one event
        decode_reads([b"data: 0123456789\n" * 10], max_line_bytes=64)


def test_the_fast_path_keeps_the_size_limit() -> None:
    # An unfinished event of plain data lines longer than the limit raises as before.
    decoder = SSEDecoder(16)
    assert decoder.feed(b"data: ok\n\n") == [SSEEvent("ok")]
    with pytest.raises(SSELineTooLong):
        decoder.feed(b"data: " + b"x" * 32)
