"""The event-stream watcher: whole events from any split of the bytes, error and [DONE] events."""

from __future__ import annotations

import pytest

from gateway.sse import EventStreamScanner, EventTooLarge, SseEvent, is_done, is_error_event

pytestmark = pytest.mark.timeout(10)

STREAM = (
    b'data: {"choices":[{"text":"a"}]}\r\n\r\n'
    b": keep-alive comment\n\n"
    b"event: error\ndata: first line\ndata:second line\n\n"
    b'data: {"error":{"message":"x","code":500}}\r\r'
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SseEvent("message", '{"choices":[{"text":"a"}]}'),
    SseEvent("error", "first line\nsecond line"),
    SseEvent("message", '{"error":{"message":"x","code":500}}'),
    SseEvent("message", "[DONE]"),
]


def scan(chunks: list[bytes], max_bytes: int = 1024) -> list[SseEvent]:
    scanner = EventStreamScanner(max_bytes)
    return [event for chunk in chunks for event in scanner.feed(chunk)]


def test_whole_stream_in_one_chunk() -> None:
    assert scan([STREAM]) == EXPECTED


def test_every_split_point_gives_the_same_events() -> None:
    # Two reads, split at every byte: CRLF and CR CR split between reads included.
    for cut in range(len(STREAM) + 1):
        assert scan([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_byte_by_byte() -> None:
    assert scan([bytes([b]) for b in STREAM]) == EXPECTED


def test_a_bom_is_skipped_and_an_unterminated_event_is_not_dispatched() -> None:
    assert scan([b"\xef\xbb", b"\xbfdata: x\n\ndata: half"]) == [SseEvent("message", "x")]


def test_an_overlong_line_raises() -> None:
    with pytest.raises(EventTooLarge):
        scan([b"data: " + b"x" * 100], max_bytes=64)
    with pytest.raises(EventTooLarge):  # many short data lines in one event
        scan([b"data: 0123456789\n" * 10], max_bytes=64)


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (SseEvent("message", '{"error":{"message":"x","code":500}}'), True),
        (SseEvent("message", '{"error": "plain text"}'), True),
        (SseEvent("error", "anything"), True),
        (SseEvent("message", '{"choices":[{"text":"\\"error\\""}]}'), False),  # text "error"
        (SseEvent("message", '{"choices":[], "error": null}'), False),
        (SseEvent("message", '["error"]'), False),  # not an object
        (SseEvent("message", "[DONE]"), False),
    ],
)
def test_is_error_event(event: SseEvent, error: bool) -> None:
    assert is_error_event(event) is error


def test_is_done() -> None:
    assert is_done(SseEvent("message", "[DONE]"))
    assert not is_done(SseEvent("message", '{"text": "[DONE]"}'))


# The fast path: plain one-line "data: " events, LF only, cut without a line loop.
PLAIN_THEN_MIXED = (
    b"data: 1\n\ndata: 2\n\nevent: error\ndata: e\n\ndata: 3\n\ndata: a\r\n\r\ndata: [DONE]\n\n"
)
PLAIN_THEN_MIXED_EVENTS = [
    SseEvent("message", "1"),
    SseEvent("message", "2"),
    SseEvent("error", "e"),
    SseEvent("message", "3"),
    SseEvent("message", "a"),
    SseEvent("message", "[DONE]"),
]


def test_plain_and_other_events_come_out_the_same_for_every_split() -> None:
    for cut in range(len(PLAIN_THEN_MIXED) + 1):
        chunks = [PLAIN_THEN_MIXED[:cut], PLAIN_THEN_MIXED[cut:]]
        assert scan(chunks) == PLAIN_THEN_MIXED_EVENTS, cut
    assert scan([bytes([b]) for b in PLAIN_THEN_MIXED]) == PLAIN_THEN_MIXED_EVENTS


def test_the_fast_path_keeps_the_size_limit() -> None:
    # An unfinished event of plain data lines longer than the limit raises as before.
    scanner = EventStreamScanner(16)
    assert scanner.feed(b"data: ok\n\n") == [SseEvent("message", "ok")]
    with pytest.raises(EventTooLarge):
        scanner.feed(b"data: " + b"x" * 32)


def test_a_bare_cr_stream_ends_with_its_done_event_not_a_missing_one() -> None:
    # Fault K: the scanner held a chunk's final CR back as a possible CRLF half, so a stream
    # with bare-CR line ends never dispatched its last event ([DONE]) and was judged no_done.
    scanner = EventStreamScanner(1024)
    assert scanner.feed(b'data: {"choices":[{"text":"a"}]}\r\r') == [
        SseEvent("message", '{"choices":[{"text":"a"}]}')
    ]
    assert scanner.feed(b"data: [DONE]\r\r") == [SseEvent("message", "[DONE]")]


def test_a_cr_ending_one_chunk_and_an_lf_opening_the_next_are_one_line_end() -> None:
    scanner = EventStreamScanner(1024)
    assert scanner.feed(b"data: x\r") == []
    assert scanner.feed(b"\ndata: y\r\n") == []  # that LF was not a blank line
    assert scanner.feed(b"\r\n") == [SseEvent("message", "x\ny")]
