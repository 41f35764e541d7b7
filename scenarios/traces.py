"""Trace input: Mooncake-format JSONL and multi-turn sessions, validated whole, and the token
blocks their prompts are built from.

Two shapes of JSONL are read (one JSON object a line, blank lines skipped, unknown extra
fields ignored):

- **Mooncake** (``kind="mooncake"``): ``timestamp`` (arrival in ms from the trace start, never
  going backwards), ``input_length``, ``output_length`` (tokens) and ``hash_ids`` (one id per
  block of ``block_tokens`` prompt tokens, 512 in Mooncake's traces; a request's i-th id stands
  for its i-th block, so two requests whose first k ids agree share their first
  k × ``block_tokens`` prompt tokens).
- **Sessions** (``kind="sessions"``, any line with a ``session_id``), the multi-turn shape
  AIPerf's Mooncake loader uses: the turns of a session appear in file order; its first turn
  carries ``timestamp``, every later turn ``delay`` instead (ms after the previous turn of the
  same session *ends*). Lines without ``session_id`` are single requests as in Mooncake.

``hash_ids`` may be left out ("lengths only"). Such a request gets fresh blocks, numbered
with negative ids (the file's own are ≥ 0) in file order, so they are unique to it — except
that a later turn of a session first repeats the previous turn's ids: its prompt *extends the
previous turn's prompt* with fresh tokens, so the conversation history is a shared prefix
(the previous turn's generated output is not part of it: it is only known once the server
has produced it). Such a turn therefore may not be shorter than the previous one. After
loading, every request's ``hash_ids`` covers its ``input_length`` in whole blocks.

A prompt is its blocks in order, each block ``block_token_ids(seed, hash_id, …)`` drawn from a
generator seeded by (run seed, hash id), the last block cut to ``input_length``
(:func:`prompt_token_ids`).

``--token-scale`` shrinks every length and the block size by one factor
(``scenarios.trace_scale``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np

from scenarios.tokens import TokenSpace, token_array
from server.net.input_files import InputTooLarge, iter_lines
from server.net.json_text import decode_error_text

#: Tokens per hash id in Mooncake's traces.
MOONCAKE_BLOCK_TOKENS = 512
#: Longest prompt or output one trace line may ask for (2**24 = 16,777,216 tokens): far beyond
#: any served context (the public Mooncake traces peak at 191k), and a bound on the blocks one
#: line makes the offline model and the prompt builder hold (a line of 10**9 tokens otherwise
#: runs for minutes before anything is said).
MAX_LENGTH_TOKENS = 2**24
#: Latest timestamp or longest delay a trace line may give (10**12 ms, about 31.7 years).
MAX_TIME_MS = 1e12
#: Errors listed in a TraceError's message (the count of the rest is given).
MAX_LISTED_ERRORS = 20
#: Errors a TraceError keeps (the rest are counted): a file of millions of bad lines is held
#: as a count, not as millions of messages.
MAX_KEPT_ERRORS = 1000
#: Largest trace file (256 MiB = 2**28 bytes): the public Mooncake traces are a few MB.
TRACE_MAX_BYTES = 2**28
#: Longest trace line (4 MiB = 2**22 bytes): the longest prompt (2**24 tokens) in Mooncake's
#: 512-token blocks is 32,768 hash ids, at most ≈ 690 KB even with 20-digit ids.
TRACE_MAX_LINE_BYTES = 2**22
#: Most requests one trace may hold (2**20 = 1,048,576): Mooncake's traces hold ≈ 24k.
MAX_TRACE_REQUESTS = 2**20
#: Most hash ids all requests of a trace may hold together, fresh ones of lengths-only lines
#: included (2**24 = 16,777,216, ≈ 0.7 GB as Python integers): Mooncake's ≈ 24k requests
#: hold well under a million. A trace of few bytes can ask for many blocks (a lengths-only
#: line of 2**24 tokens is 32,768 fresh ids), so the file size alone does not bound memory.
MAX_TRACE_BLOCKS = 2**24


class TraceError(ValueError):
    """A trace file that cannot be replayed, with where and why.

    Attributes:
        path: the file.
        line: 1-based line of the first bad line, ``None`` for the file as a whole (unreadable,
            empty).
        reason: why; when several lines are bad it lists the first ``MAX_LISTED_ERRORS`` of
            them (``path:line: reason``, one a line) and the count of the rest.
        errors: the first ``MAX_KEPT_ERRORS`` ``(line, reason)`` found, in file order.
        uncounted: errors found beyond those kept.

    ``str(err)`` is ``"{path}:{line}: {reason}"`` (``"{path}: {reason}"`` without a line).
    """

    def __init__(self, path: str, errors: list[tuple[int | None, str]], uncounted: int = 0) -> None:
        self.path = path
        self.errors = tuple(errors)
        self.uncounted = uncounted
        self.line, first = errors[0]
        found = len(errors) + uncounted
        if found == 1:
            self.reason = first
        else:
            listed = [f"{path}:{n}: {why}" for n, why in errors[1:MAX_LISTED_ERRORS]]
            rest = found - 1 - len(listed)
            more = f"\n… and {rest} more" if rest > 0 else ""
            self.reason = (
                f"{first}\n{found} bad lines in all; the others:\n" + "\n".join(listed) + more
            )
        where = f"{path}:{self.line}" if self.line is not None else path
        super().__init__(f"{where}: {self.reason}")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace.

    Attributes:
        line: 1-based line of the file it came from.
        timestamp_ms: arrival in ms from the trace start; ``None`` for a session turn after the
            first (it is sent ``delay_ms`` after the previous turn ends).
        input_length: prompt tokens (> 0).
        output_length: output tokens (≥ 1).
        hash_ids: one id per block of the trace's ``block_tokens`` prompt tokens,
            ``len == ceil(input_length / block_tokens)``; negative ids are fresh blocks made
            for a lengths-only line (see the module doc). Empty only if built by hand for a
            session turn given by lengths (``load_trace`` always fills it).
        session_id: the session it belongs to, ``None`` for a single request.
        turn: 0-based index within its session (0 for a single request).
        delay_ms: for turn k > 0, ms after turn k − 1 ends that it is sent; 0 otherwise.
    """

    line: int
    timestamp_ms: float | None
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    session_id: str | None = None
    turn: int = 0
    delay_ms: float = 0.0


@dataclass(frozen=True)
class Trace:
    """A validated trace.

    Attributes:
        path: the file read.
        sha256: hex digest of the file's bytes (identifies the workload).
        kind: ``"mooncake"``, or ``"sessions"`` when any line has a ``session_id``.
        block_tokens: prompt tokens per hash id (512 for Mooncake; scaled by
            :func:`scale_trace`).
        requests: in file order.
        token_scale: the factor :func:`scale_trace` applied (1 as loaded).
    """

    path: str
    sha256: str
    kind: Literal["mooncake", "sessions"]
    block_tokens: int
    requests: tuple[TraceRequest, ...]
    token_scale: Fraction = Fraction(1)

    @property
    def arrivals_ms(self) -> list[float]:
        """Timestamps (ms) of the requests that carry one (every one but later session turns)."""
        return [r.timestamp_ms for r in self.requests if r.timestamp_ms is not None]

    @property
    def span_ms(self) -> float:
        """Last timestamped arrival − first (ms); later session turns are not counted: their
        times depend on how fast the server answers."""
        arrivals = self.arrivals_ms
        return max(arrivals) - min(arrivals) if arrivals else 0.0

    def sessions(self) -> dict[str, tuple[TraceRequest, ...]]:
        """session id → its turns in order (empty for a Mooncake trace)."""
        out: dict[str, list[TraceRequest]] = {}
        for r in self.requests:
            if r.session_id is not None:
                out.setdefault(r.session_id, []).append(r)
        return {k: tuple(v) for k, v in out.items()}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) and math.isfinite(value)


class _Reader:
    """Line-by-line validation state of one file (collects every error)."""

    def __init__(self, path: str, block_tokens: int) -> None:
        self.path = path
        self.block_tokens = block_tokens
        self.errors: list[tuple[int | None, str]] = []
        self.uncounted = 0
        self.requests: list[TraceRequest] = []
        self.last_timestamp: tuple[int, float] | None = None
        self.last_turn: dict[str, TraceRequest] = {}
        self.next_fresh_id = -1
        self.blocks = 0

    def fail(self, error: tuple[int | None, str]) -> None:
        """Record an error (counted only, beyond ``MAX_KEPT_ERRORS``)."""
        if len(self.errors) < MAX_KEPT_ERRORS:
            self.errors.append(error)
        else:
            self.uncounted += 1

    def error(self) -> TraceError | None:
        """The errors found so far as one TraceError, else ``None``."""
        return TraceError(self.path, self.errors, self.uncounted) if self.errors else None

    def fresh_ids(self, n: int) -> tuple[int, ...]:
        ids = tuple(range(self.next_fresh_id, self.next_fresh_id - n, -1))
        self.next_fresh_id -= n
        return ids

    def read(self, line: int, text: str) -> None:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            self.fail((line, f"not JSON ({decode_error_text(exc, f'column {exc.colno}')})"))
            return
        if not isinstance(obj, dict):
            self.fail((line, f"not a JSON object (a {type(obj).__name__})"))
            return
        problems: list[str] = []
        request = self.parse(line, obj, problems)
        if problems:
            self.fail((line, "; ".join(problems)))
        elif request is not None:
            self.requests.append(request)
            self.blocks += len(request.hash_ids)
            if request.session_id is not None:
                self.last_turn[request.session_id] = request

    def parse(self, line: int, obj: dict[str, Any], problems: list[str]) -> TraceRequest | None:
        lengths = {}
        for name, least in (("input_length", 1), ("output_length", 1)):
            if name not in obj:
                problems.append(f"missing field {name!r}")
                continue
            value = obj[name]
            if not _is_int(value):
                problems.append(f"{name} must be an integer, got {json.dumps(value)}")
            elif value < least:
                problems.append(f"{name} must be ≥ {least}, got {value}")
            elif value > MAX_LENGTH_TOKENS:
                problems.append(f"{name} must be ≤ {MAX_LENGTH_TOKENS} tokens, got {value}")
            else:
                lengths[name] = value

        session_id = obj.get("session_id")
        if session_id is not None and not isinstance(session_id, str):
            problems.append(f"session_id must be a string, got {json.dumps(session_id)}")
            session_id = None
        previous = self.last_turn.get(session_id) if session_id is not None else None
        timestamp, delay = self.parse_time(line, obj, previous, session_id, problems)

        hash_ids: tuple[int, ...] | None = None
        if "hash_ids" in obj:
            raw = obj["hash_ids"]
            if not isinstance(raw, list):
                problems.append(f"hash_ids must be a list, got {json.dumps(raw)[:40]}")
            else:
                bad = [i for i, h in enumerate(raw) if not _is_int(h) or h < 0]
                if bad:
                    problems.append(
                        f"hash_ids must be non-negative integers, got {json.dumps(raw[bad[0]])} "
                        f"at index {bad[0]}"
                    )
                else:
                    hash_ids = tuple(raw)
        if problems or "input_length" not in lengths:
            return None
        input_length = lengths["input_length"]
        blocks = math.ceil(input_length / self.block_tokens)
        if self.blocks + blocks > MAX_TRACE_BLOCKS:
            problems.append(
                f"its {blocks:,} blocks of {self.block_tokens} tokens take the trace past "
                f"{MAX_TRACE_BLOCKS:,} blocks (hash ids, fresh ones of lengths-only lines "
                "included), the limit of one trace"
            )
            return None
        if hash_ids is not None and len(hash_ids) != blocks:
            problems.append(
                f"{len(hash_ids)} hash_ids do not cover input_length {input_length} in whole "
                f"blocks of {self.block_tokens} tokens: expected ceil({input_length} / "
                f"{self.block_tokens}) = {blocks}"
            )
            return None
        if hash_ids is None:
            if previous is not None:
                if input_length < previous.input_length:
                    problems.append(
                        f"a lengths-only turn extends the previous turn's prompt (line "
                        f"{previous.line}, {previous.input_length} tokens), so its "
                        f"input_length {input_length} may not be shorter"
                    )
                    return None
                kept = previous.hash_ids
                hash_ids = kept + self.fresh_ids(blocks - len(kept))
            else:
                hash_ids = self.fresh_ids(blocks)
        return TraceRequest(
            line=line,
            timestamp_ms=timestamp,
            input_length=input_length,
            output_length=lengths["output_length"],
            hash_ids=hash_ids,
            session_id=session_id,
            turn=previous.turn + 1 if previous is not None else 0,
            delay_ms=delay,
        )

    def parse_time(
        self,
        line: int,
        obj: dict[str, Any],
        previous: TraceRequest | None,
        session_id: str | None,
        problems: list[str],
    ) -> tuple[float | None, float]:
        """(timestamp_ms, delay_ms) of the line; appends to ``problems`` what is wrong."""
        if previous is not None:  # a later turn of a session
            if "timestamp" in obj:
                problems.append(
                    f"later turn of session {session_id!r} (previous turn at line "
                    f"{previous.line}) gives 'timestamp'; later turns give 'delay' (ms after "
                    "the previous turn ends)"
                )
            if "delay" not in obj:
                problems.append(
                    f"later turn of session {session_id!r} is missing its 'delay' (ms after "
                    f"the previous turn, line {previous.line}, ends)"
                )
                return None, 0.0
            delay = obj["delay"]
            if not _is_number(delay):
                problems.append(f"delay must be a number of ms, got {json.dumps(delay)}")
                return None, 0.0
            if delay < 0:
                problems.append(f"delay must be ≥ 0 ms, got {delay}")
            elif delay > MAX_TIME_MS:
                problems.append(f"delay must be ≤ {MAX_TIME_MS:.0f} ms, got {delay}")
            return None, float(delay)

        if session_id is not None and "delay" in obj:
            problems.append(
                f"first turn of session {session_id!r} gives 'delay'; a first turn gives "
                "'timestamp' (ms from the trace start)"
            )
        if "timestamp" not in obj:
            what = (
                f"first turn of session {session_id!r} is missing its 'timestamp'"
                if session_id is not None
                else "missing field 'timestamp'"
            )
            problems.append(what)
            return None, 0.0
        timestamp = obj["timestamp"]
        if not _is_number(timestamp):
            problems.append(f"timestamp must be a number of ms, got {json.dumps(timestamp)}")
            return None, 0.0
        if timestamp < 0:
            problems.append(f"timestamp must be ≥ 0 ms, got {timestamp}")
            return None, 0.0
        if timestamp > MAX_TIME_MS:
            problems.append(f"timestamp must be ≤ {MAX_TIME_MS:.0f} ms, got {timestamp}")
            return None, 0.0
        if self.last_timestamp is not None and timestamp < self.last_timestamp[1]:
            before_line, before = self.last_timestamp
            problems.append(
                f"timestamp goes backwards: {timestamp} ms after {before} ms at line {before_line}"
            )
        else:
            self.last_timestamp = (line, float(timestamp))
        return float(timestamp), 0.0


def load_trace(path: Path, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """Read and validate a whole trace file (shapes and rules in the module doc).

    Args:
        path: a JSONL file.
        block_tokens: prompt tokens per hash id (512 in Mooncake's traces).

    Returns:
        The trace, requests in file order, every request's ``hash_ids`` filled.

    The file is read one line at a time, never whole: at most ``TRACE_MAX_LINE_BYTES`` a
    line and ``TRACE_MAX_BYTES`` in all, ``MAX_TRACE_REQUESTS`` requests and
    ``MAX_TRACE_BLOCKS`` hash ids, so no file (``/dev/zero`` included) holds more memory
    than those bounds allow.

    Raises:
        TraceError: the file cannot be read, is empty, has bad lines or passes a limit; every
            bad line is found (not only the first) and the first ``MAX_LISTED_ERRORS`` are
            listed with their 1-based line numbers and reasons.
        ValueError: ``block_tokens`` < 1.
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be ≥ 1, got {block_tokens}")
    name = str(path)
    reader = _Reader(name, block_tokens)
    digest = hashlib.sha256()
    lines = iter_lines(
        path, max_line_bytes=TRACE_MAX_LINE_BYTES, max_bytes=TRACE_MAX_BYTES, what="a trace",
        hasher=digest,
    )  # fmt: skip
    try:
        for number, raw in lines:
            _read_line(reader, number, raw)
    except InputTooLarge:
        reader.fail((None, f"larger than {TRACE_MAX_BYTES:,} bytes, the limit of a trace file"))
    except OSError as exc:
        raise TraceError(name, [(None, f"cannot read the trace: {exc.strerror or exc}")]) from exc
    error = reader.error()
    if error is not None:
        raise error
    if not reader.requests:
        raise TraceError(name, [(None, "empty trace: no requests")])
    return Trace(
        path=name,
        sha256=digest.hexdigest(),
        kind="sessions" if reader.last_turn else "mooncake",
        block_tokens=block_tokens,
        requests=tuple(reader.requests),
    )


def _read_line(reader: _Reader, number: int, raw: bytes | None) -> None:
    """Read line ``number`` (``None``: longer than the limit) into ``reader``."""
    if raw is None:
        why = f"longer than {TRACE_MAX_LINE_BYTES:,} bytes, the limit of one trace line"
        reader.fail((number, why))
        return
    if not raw.strip():
        return
    if len(reader.requests) >= MAX_TRACE_REQUESTS:
        reader.fail((number, f"past {MAX_TRACE_REQUESTS:,} requests, the limit of one trace"))
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        reader.fail((number, "not UTF-8 text"))
        return
    reader.read(number, text)


def block_token_ids(seed: int, hash_id: int, block_tokens: int, space: TokenSpace) -> np.ndarray:
    """The ``block_tokens`` token IDs of block ``hash_id`` (int64 array, in ``space``).

    Deterministic in (seed, hash_id, block_tokens), drawn like ``scenarios.workloads``'s
    prompts (a generator seeded by SHA-256 of the key) under a key of its own
    (``trace-block/{hash_id}``), so trace blocks never coincide with other workloads' prompts.
    """
    return token_array(seed, f"trace-block/{hash_id}", block_tokens, space)


def _blocks(
    request: TraceRequest, seed: int, block_tokens: int, space: TokenSpace
) -> Iterator[np.ndarray]:
    remaining = request.input_length
    for hash_id in request.hash_ids:
        if remaining <= 0:
            break
        block = block_token_ids(seed, hash_id, block_tokens, space)
        yield block[:remaining]
        remaining -= block_tokens


def prompt_token_ids(
    request: TraceRequest, seed: int, block_tokens: int, space: TokenSpace
) -> np.ndarray:
    """The prompt of ``request``: its blocks in order, the last cut to ``input_length``.

    Two requests whose first k hash ids agree share exactly their first k × ``block_tokens``
    tokens; where their ids first differ, the blocks are independent draws.

    Raises:
        ValueError: ``hash_ids`` does not cover ``input_length`` in whole blocks.
    """
    needed = math.ceil(request.input_length / block_tokens)
    if len(request.hash_ids) != needed:
        raise ValueError(
            f"line {request.line}: {len(request.hash_ids)} hash ids for {request.input_length} "
            f"tokens in blocks of {block_tokens} (needs {needed})"
        )
    return np.concatenate(list(_blocks(request, seed, block_tokens, space)))
