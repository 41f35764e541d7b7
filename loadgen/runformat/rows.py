"""The rows of a run directory the load generator writes, as types (msgspec Structs).

One definition per row kind, used by the writers (``loadgen``) and by every reader
(``analysis``, through :mod:`loadgen.runformat`). Lines are encoded with
``msgspec.json.encode`` and read back with ``msgspec.convert(..., strict=True)``: integers are
JSON integers (a nanosecond stamp ``"5"`` or ``1.5`` is not one), a status is one of the known
ones; fields a row does not carry take their defaults; unknown fields are ignored. Stamps are
integer nanoseconds of the monotonic clock (``*_ns``); the run's wall-clock anchor is in
``run.json``. The page ``docs/run-format.md`` lists every row kind with its fields.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

import msgspec

from loadgen.token_timing import TokenTiming

Status = Literal["ok", "error", "aborted", "not_sent", "interrupted"]

#: The start of a ``not_sent`` record's ``error`` when its connection could not be made
#: (refused, unreachable, connect timeout): no byte of the request left the client.
NOT_CONNECTED = "not sent: could not connect"
#: What ended a phase (``PhaseRow.ended_by``): its plan ran out (``plan``), the user's Ctrl-C
#: or SIGTERM (``interrupt``), its server died or stopped answering (``server_died``), an
#: error of the load generator itself (``error``: a file it could not write, a worker).
PhaseEnd = Literal["plan", "interrupt", "server_died", "error"]
#: Status of a case (``case.json``) or a run (``run.json``, ``manifest.json``).
RunStatus = Literal["running", "ok", "failed", "interrupted"]


class RequestRecord(msgspec.Struct):
    """Everything observed about one request: one line of ``requests.jsonl`` (or of
    ``requests.worker-K.jsonl``).

    Attributes:
        request_id: unique within the run.
        case: case name (server configuration).
        phase: phase name.
        index: position in the phase's request list.
        group: prefix group (e.g. ``anchors-2``) for requests sharing a prefix, else ``None``.
        prompt_tokens_sent: exact prompt length in tokens (prompts are token-ID lists).
        max_tokens: requested output tokens (sent with ``ignore_eos``).
        scheduled_ns: when the schedule wanted it sent (monotonic ns): the phase start for
            closed-loop and all-at-once, phase start + offset for open loop.
        admitted_ns: when the client's concurrency slot was acquired (closed loop,
            all-at-once, open loop with ``max_concurrency``); ``scheduled_ns`` for an uncapped
            open loop. ``admitted_ns − scheduled_ns`` is time spent waiting at the client.
        sent_ns: when the request was handed to the connection pool, the start of the HTTP
            request (prompt built and encoded before it); TTFT is measured from here.
        connection_ready_ns: when a connection was obtained (a reused one, or a new one
            connected); ``None`` without request tracing (:func:`loadgen.connections.open_session`).
        new_connection: whether that connection was newly opened (its TCP connect counts
            into ``connection_ready_ns − sent_ns``), ``None`` without tracing.
        request_sent_ns: when the request (headers and body, coalesced) was written to the
            socket (aiohttp's ``on_request_chunk_sent`` signal, just before the write).
        headers_ns: when the response headers were received (the first byte of the answer).
        chunk_ns: arrival time of every chunk that carried at least one generated token
            (one stamp per network read: chunks that arrived together share it).
        chunk_tokens: generated tokens in each of those chunks (same length as ``chunk_ns``).
        token_timing: how ``chunk_tokens`` were counted (:mod:`loadgen.token_timing`):
            ``usage`` (the server's running usage: exact), ``text`` (no running usage: each
            chunk with a choice is a candidate, reconciled with the final usage so the counts
            sum to it), ``final_only`` (2+ tokens, all in one chunk: TTFT is really E2EL),
            ``None`` when no token arrived.
        end_ns: when the response finished (stream closed, error, or disconnect).
        http_status: response status code, ``None`` if no response arrived.
        status: ``ok``, ``error``, ``aborted`` (client disconnected on purpose), ``not_sent``
            or ``interrupted`` (in flight when the user's Ctrl-C or SIGTERM cut the run: not a
            failure of the server, counted apart from ``error``).
        error: error message for ``error`` records (and why for ``interrupted`` ones, and for
            ``not_sent`` ones whose connection failed: ``NOT_CONNECTED: …``, no ``sent_ns``).
        usage_prompt_tokens / usage_completion_tokens: the server's final usage.
        cached_tokens: prefix-cache hit tokens reported by the server for this request.
        finish_reason: the server's finish reason (``length`` with ``ignore_eos``).
        disconnect_ns: when the client closed the connection on purpose.
        retry_after: the ``Retry-After`` header of an answer that was not 200, as sent (its
            first 100 characters, valid or not), ``None`` when it had none.
        upstream: the upstream a gateway chose (its ``X-Gateway-Upstream`` header), if any.
        excess_tokens: tokens beyond what the request allowed (received or in the final
            usage beyond ``max_tokens``, or received beyond the usage's count), ``None`` when
            none (:func:`excess_tokens`).
    """

    request_id: str
    case: str
    phase: str
    index: int
    group: str | None
    prompt_tokens_sent: int
    max_tokens: int
    scheduled_ns: int
    admitted_ns: int | None = None
    sent_ns: int | None = None
    connection_ready_ns: int | None = None
    new_connection: bool | None = None
    request_sent_ns: int | None = None
    headers_ns: int | None = None
    chunk_ns: list[int] = []
    chunk_tokens: list[int] = []
    token_timing: TokenTiming | None = None
    end_ns: int | None = None
    http_status: int | None = None
    status: Status = "not_sent"
    error: str | None = None
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    disconnect_ns: int | None = None
    upstream: str | None = None
    retry_after: str | None = None
    excess_tokens: int | None = None

    @property
    def output_tokens(self) -> int:
        """Generated tokens received (sum over chunks)."""
        return sum(self.chunk_tokens)

    def to_json(self) -> str:
        """The record as one compact JSON line (no newline): every field, in order.

        msgspec's encoder, not ``json.dumps`` over a dict: this runs on the sending loop once
        per finished request (figures for a 17- and a 512-chunk record in the commit that
        made this a Struct)."""
        return _ENCODER.encode(self).decode()


def excess_tokens(record: RequestRecord) -> int | None:
    """Tokens beyond what the request allowed, or ``None`` when there are none: what the
    client records as ``excess_tokens``, and what a reader checks that field against.

    The larger of: tokens received or reported by the final usage beyond ``max_tokens``, and
    tokens received beyond the usage's count (a server streaming past its own count). 20
    token chunks for ``max_tokens`` 16 → 4, whatever the usage says (≤ 20).
    """
    received = record.output_tokens
    usage = record.usage_completion_tokens
    over = max(received, usage or 0) - record.max_tokens
    if usage is not None:
        over = max(over, received - usage)
    return over if over > 0 else None


def _stamp_fields(list_of: bool) -> tuple[str, ...]:
    """The request record's monotonic stamp fields (``*_ns``), read off its type: those of
    one stamp (``int`` or ``int | None``), or with ``list_of`` those holding a list of them."""
    hints = typing.get_type_hints(RequestRecord)
    wanted = (list[int],) if list_of else (int, int | None)
    return tuple(f for f in RequestRecord.__struct_fields__
                 if f.endswith("_ns") and hints[f] in wanted)  # fmt: skip


#: Record fields holding one monotonic stamp (ns), and those holding a list of them: what a
#: reader moves onto another clock (``loadgen.runformat.record_files.shift_stamps``).
STAMP_FIELDS = _stamp_fields(list_of=False)
STAMP_LIST_FIELDS = _stamp_fields(list_of=True)


class ReadRecord(RequestRecord, kw_only=True):
    """A request record as the readers hold it: ``worker`` is the load-generator worker whose
    file it came from (``None`` for ``requests.jsonl``), set by the reader, never written."""

    worker: int | None = None


class WorkerPhaseRow(msgspec.Struct, kw_only=True):
    """One worker's figures for a phase it sent part of (``workers`` of a :class:`PhaseRow`).

    Attributes:
        worker: worker index.
        node: the host (Ray node) it ran on.
        requests: records it wrote.
        statuses: those records by status.
        loop_lag_max_ms / loop_lag_p99_ms: its event loop's lag (ms).
        late_sends: open-loop sends it started late.
        warmup_connections / warmup_opened / warmup_failed / warmup_ms: its connection
            warm-up (connections asked, newly opened, failed; duration in ms).
        clock_offset_ns / clock_offset_bound_ns: its clock's offset to the coordinator's and
            the error bound (ns), ``None`` on one host.
        error: why it failed, if it did.
    """

    worker: int
    node: str
    requests: int
    statuses: dict[str, int]
    loop_lag_max_ms: float
    loop_lag_p99_ms: float
    late_sends: int
    warmup_connections: int
    warmup_opened: int | None
    warmup_failed: int
    warmup_ms: float
    clock_offset_ns: int | None = None
    clock_offset_bound_ns: int | None = None
    error: str | None = None


class PhaseRow(msgspec.Struct, kw_only=True):
    """One line of ``phases.jsonl``: a phase's boundaries and the sender's figures.

    Attributes:
        phase: phase name.
        start_ns: first request sent (monotonic ns).
        last_end_ns: last request finished (monotonic ns).
        end_ns: after the settle wait (monotonic ns); [start_ns, end_ns] is the window of the
            phase's counter deltas.
        settle_s: settle wait after the last request (s).
        requests: requests dispatched.
        resolved: a late-bound rate resolved before the phase, with its inputs.
        measurement: the figure measured from this phase's records, if one names it.
        derived: plan figures derived right after this phase, by name.
        loop_lag_max_ms / loop_lag_p99_ms: the sending loop's lag (ms); ``None`` when cut.
        late_sends: open-loop sends started late.
        warmup_connections / warmup_opened / warmup_failed / warmup_ms: connection warm-up
            (connections asked, newly opened, failed; duration in ms).
        server_idle_after: the server was idle again after the phase (``None``: not waited for).
        requested_concurrency: the phase's concurrency limit (``None``: uncapped open loop).
        post_scrape_start_ns: start of the first ok scrape after the last request ended
            (``None``: none landed in time: the phase's counter deltas are stale).
        post_scrape_waited_s: how long the wait for it took (s).
        workers: per-worker figures when the phase was split across workers.
        interrupted: the phase was cut short (server gone, Ctrl-C, an error); its row was
            written then.
        ended_by: what ended the phase (``PhaseEnd``: ``plan``, ``interrupt``,
            ``server_died``, ``error``); ``None`` in runs written before it was recorded.
        end_reason: why, in words, when something other than the plan ended it.
        rebuilt_from_records: the reader built this row from the records (no row was written:
            the load generator was killed during the phase); never written.
    """

    phase: str
    start_ns: int
    last_end_ns: int
    end_ns: int
    settle_s: float = 0.0
    requests: int | None = None
    resolved: dict[str, Any] | None = None
    measurement: dict[str, Any] | None = None
    derived: dict[str, Any] | None = None
    loop_lag_max_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    late_sends: int | None = None
    warmup_connections: int | None = None
    warmup_opened: int | None = None
    warmup_failed: int | None = None
    warmup_ms: float | None = None
    server_idle_after: bool | None = None
    requested_concurrency: int | None = None
    post_scrape_start_ns: int | None = None
    post_scrape_waited_s: float | None = None
    workers: list[WorkerPhaseRow] | None = None
    interrupted: bool = False
    ended_by: PhaseEnd | None = None
    end_reason: str | None = None
    rebuilt_from_records: bool = False


class ClockOffsetRow(msgspec.Struct, kw_only=True):
    """One line of ``clock_offsets.jsonl``: a worker's clock against the coordinator's,
    measured before a phase (Cristian's method, ``loadgen.workers.base.ClockOffset``).

    Attributes:
        phase: the phase it was measured before.
        worker: worker index.
        node: the worker's host.
        offset_ns: worker clock − coordinator clock (ns); a worker stamp t is t − offset_ns
            on the coordinator's clock.
        rtt_ns: the least round trip (ns).
        bound_ns: the error bound, half of that round trip (ns).
        samples: round trips measured.
    """

    phase: str
    worker: int
    node: str = ""
    offset_ns: int
    rtt_ns: int = 0
    bound_ns: int = 0
    samples: int = 0


class FaultRow(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of ``faults.jsonl``: a replica killed, or restarted (stamps monotonic ns).

    Attributes:
        fault: ``kill_replica`` (killed) or ``restarted``.
        replica: the replica's index.
        url: its URL.
        killed_ns / stopped_ns: kill asked / process gone (a kill).
        healthy_ns: healthy again (a restart).
        startup_s: how long its start took (s) (a restart).
    """

    fault: str
    replica: int
    url: str
    killed_ns: int | None = None
    stopped_ns: int | None = None
    healthy_ns: int | None = None
    startup_s: float | None = None


class KvEventRow(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of ``kv_events.jsonl``: one KV-cache event a replica's vLLM published
    (``loadgen.kvevents``), or a note of events lost.

    Attributes:
        event: ``stored`` (BlockStored), ``removed`` (BlockRemoved), ``cleared``
            (AllBlocksCleared), ``gap`` (messages ``seq`` … ``seq + missing − 1`` never
            arrived) or ``undecodable`` (a message that was not a KV-event batch).
        seq: the publisher's sequence number of the message (one message per engine step).
        index: the event's position in its message.
        recv_ns: when the recorder received the message (monotonic ns).
        ts: the engine's wall-clock time of the step (s since the epoch).
        block_hashes: vLLM's hashes of the blocks (its own, seeded per process).
        parent_block_hash: ``stored``: the hash of the block before the first one, ``None``
            for a prompt's first block.
        token_ids: ``stored``: the tokens of every stored block, in order.
        block_size: ``stored``: tokens per block.
        medium: where the blocks live (``CPU`` on the CPU build).
        missing: ``gap``: messages lost.
        error: ``undecodable``: why.
    """

    event: Literal["stored", "removed", "cleared", "gap", "undecodable"]
    seq: int
    index: int = 0
    recv_ns: int
    ts: float | None = None
    block_hashes: list[int] = []
    parent_block_hash: int | None = None
    token_ids: list[int] = []
    block_size: int | None = None
    medium: str | None = None
    missing: int | None = None
    error: str | None = None


class CaseInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``cases/NAME/case.json``: a case's status and its server's facts.

    Attributes:
        case: the case's plan entry (``scenarios.plan.CaseSpec``, dumped).
        server: the server's facts (``server.manager.RunningServer.describe``: URL, version,
            argv, capacity, …); absent when it did not start.
        status: ``running`` while the case runs, then ``ok``, ``failed`` or ``interrupted``
            (``None`` only in the defaults a reader gives a missing or unusable file).
        error: why the case failed.
        requests / failed_requests: records written / of them ``error``.
        client: how each sending thread was placed (``loadgen.placement``), a list with one
            dict per worker, ``None`` for a worker Ray placed. Display only, so not typed
            here: the report reads it leniently (``analysis.summaries.client_rows``), never a
            reason to drop the case's status and server facts.
    """

    case: dict[str, Any] | None = None
    server: dict[str, Any] | None = None
    status: RunStatus | None = None
    error: str | None = None
    requests: int | None = None
    failed_requests: int | None = None
    client: Any = None


class RunInfo(msgspec.Struct, kw_only=True):
    """``run.json``: the run's command, versions, wall-clock anchor and status.

    Attributes:
        format_version: the run format (``loadgen.runformat.FORMAT_VERSION``); runs written
            before it was recorded have none and read as version 0.
        scenario: scenario name.
        command: the command line.
        started_at: UTC start (ISO 8601, ``Z``).
        clock: the wall-clock anchor (``loadgen.clock.wall_anchor``) that converts monotonic
            stamps.
        versions: versions of the pieces that shape results (``loadgen.runformat.manifest``).
        model_variant: the embedded model's variant and why, if the run starts servers.
        load_generator: how the load was spread (``loadgen.workers.process.WorkersConfig``).
        status: ``running``, then ``ok``, ``failed`` or ``interrupted``.
        error: why the run failed.
        wall_s: the run's duration (s).
        interleaved: set when a gate ran this run phase by phase beside the other side's run
            of its pair (``loadgen.turns``): ``blocks`` (``phase``), ``pair`` (N of
            ``run-N``), ``first`` (the side whose turn came first), ``with`` (the other run,
            ``SIDE/run-N``); ``None`` for a run on its own.
    """

    format_version: int = 0
    scenario: str | None = None
    command: list[str] | None = None
    started_at: str | None = None
    clock: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    model_variant: dict[str, Any] | None = None
    load_generator: dict[str, Any] | None = None
    status: RunStatus | None = None
    error: str | None = None
    wall_s: float | None = None
    interleaved: dict[str, Any] | None = None


class ManifestFile(msgspec.Struct, kw_only=True):
    """A file of the run in ``manifest.json``.

    Attributes:
        path: relative to the run directory, ``/``-separated.
        bytes: its size (bytes).
        sha256: its SHA-256, hex.
    """

    path: str
    bytes: int
    sha256: str


class Reseal(msgspec.Struct, kw_only=True):
    """One explicit re-seal of a run (``loadgen report --reseal REASON``) in ``manifest.json``:
    the run's files were sealed again although they no longer matched the manifest before it
    (or it had none).

    Attributes:
        at: UTC time of the re-seal (ISO 8601, ``Z``).
        reason: why, as the user gave it.
        changed: what differed from the manifest before it (one finding per file, or that
            there was no manifest).
    """

    at: str
    reason: str
    changed: list[str] = []


class Manifest(msgspec.Struct, kw_only=True):
    """``manifest.json``, written last: a run directory without it is incomplete.

    Attributes:
        status: the run's status when it was sealed.
        command: the command that wrote (or last re-sealed) it.
        written_at: UTC time of sealing (ISO 8601, ``Z``).
        versions: versions of the pieces that shape results (``environment_facts``).
        files: every other file of the run, with its size and hash.
        resealed: every explicit re-seal, oldest first (empty: the files are as the run
            wrote them); kept by every later sealing.
    """

    status: str
    command: list[str]
    written_at: str
    versions: dict[str, Any]
    files: list[ManifestFile]
    resealed: list[Reseal] = []


_ENCODER = msgspec.json.Encoder()
