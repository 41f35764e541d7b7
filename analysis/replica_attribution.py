"""Which replica served each request of a fleet case, from evidence the replicas wrote.

Three sources, in order (:func:`case_placement`):

1. **The gateway's answer**: the project's gateway names the replica of each response
   (``X-Gateway-Upstream``, the record's ``upstream``).
2. **The replicas' own logs**, behind vllm-router, which names none: the client sends each
   request with ``X-Request-Id: <record's request_id>`` (``loadgen.client``); vllm-router
   0.1.17 forwards every request header to the worker it picked (``send_typed_request`` in
   its ``src/routers/http/router.rs`` copies them all but Content-Type/Content-Length and
   the trace headers; checked on the installed router, docs/fleet.md); vLLM takes the
   header as the request's id (``cmpl-<id>-0`` for a completion, ``chatcmpl-<id>`` for a
   chat, ``OpenAIServing._base_request_id``) and, started with ``--enable-log-requests``
   (``server.config.ServerConfig.log_requests``), logs ``Received request <vLLM id>:
   params: …`` at INFO as it receives it. The case keeps what each replica logged during it
   (``vllm_requests.log``, ``loadgen.case.request_logs``), so each log names the requests
   that replica received (:func:`attribute`). Decided only when every replica has its log,
   no request is named by two replicas and every request answered ``ok`` is named by one; a
   failed request named by none reached no replica. Other lines (vLLM's own, the access
   log) and ids of no request of the case are skipped, and counted.
3. **The fleet model's placement** where it is exact and says which replica, i.e.
   vllm-router's ``consistent_hash`` (a run recorded before the replicas logged requests);
   ``round_robin`` and ``kv_aware`` are exact but not which worker is which
   (``scenarios.fleet.model.UNNAMED_REPLICAS``).

Otherwise which replica served each request is unknown, and the reason is named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.fleet import FleetData
from loadgen.runformat.layout import REQUEST_LOG, replica_dir
from scenarios.fleet.model import FleetOptions, predict_fleet
from scenarios.fleet.requests import FleetRequest

#: vLLM's request logger at INFO (``vllm/entrypoints/serve/utils/request_logger.py``, 0.32.0).
RECEIVED = re.compile(r"Received request (?P<id>\S+): params: ")
#: The prefixes vLLM's completion and chat endpoints put before the client's id.
VLLM_PREFIXES = ("cmpl-", "chatcmpl-")
#: The suffix of the prompt's index within the request (``-0``; a chat's ``_1`` of several).
PROMPT_SUFFIX = re.compile(r"[-_]\d+$")
#: The basis of a placement read from the replicas' logs.
FROM_LOGS = f"the replicas' request logs ({REQUEST_LOG})"


def record_id(logged: str, known: Set[str]) -> str | None:
    """The request id of ``known`` that vLLM's id ``logged`` names (``cmpl-<id>-0`` →
    ``<id>``), or ``None`` when it names none of them."""
    rest = logged
    for prefix in VLLM_PREFIXES:
        if logged.startswith(prefix):
            rest = logged[len(prefix) :]
            break
    if rest in known:
        return rest
    base = PROMPT_SUFFIX.sub("", rest)
    return base if base in known else None


@dataclass(frozen=True)
class Attribution:
    """What the replicas' logs say of a case's requests.

    Attributes:
        replica_of: request id → the one replica whose log names it.
        on_several: request id → the replicas (ascending) whose logs all name it.
        without_log: replicas that have no log (nothing to read).
        foreign: ``Received request`` lines naming no request of the case.
    """

    replica_of: Mapping[str, int]
    on_several: Mapping[str, tuple[int, ...]]
    without_log: tuple[int, ...]
    foreign: int

    def placements(
        self, request_ids: Sequence[str], answered: Sequence[bool]
    ) -> tuple[list[int | None] | None, str]:
        """The replica of each of ``request_ids`` (``None`` for a failed request named by no
        log) and its basis in words; or ``None`` and why it is undecided (module doc).
        ``answered[i]``: request i ended ``ok``."""
        if self.without_log:
            k = self.without_log
            if len(k) == 1:
                return (
                    None,
                    f"replica {k[0]} has no {REQUEST_LOG}: which requests it served is unknown",
                )
            which = f"{', '.join(map(str, k[:-1]))} and {k[-1]}"
            return (
                None,
                f"replicas {which} have no {REQUEST_LOG}: which requests they served is unknown",
            )
        several = [i for i in request_ids if i in self.on_several]
        if several:
            where = " and ".join(map(str, self.on_several[several[0]]))
            return None, (
                f"{len(several)} request(s) are in several replicas' logs (first: "
                f"{several[0]}, in replicas {where}'s): which one served them is unknown"
            )
        placed = [self.replica_of.get(i) for i in request_ids]
        lost = [i for i, p, ok in zip(request_ids, placed, answered, strict=True)
                if p is None and ok]  # fmt: skip
        if lost:
            return None, (
                f"{len(lost)} request(s) answered ok are in no replica's log (first: "
                f"{lost[0]}): which replica served them is unknown"
            )
        basis = FROM_LOGS
        unplaced = sum(p is None for p in placed)
        if unplaced:
            basis += f"; {unplaced} failed request(s) reached no replica"
        return placed, basis


def attribute(logs: Sequence[str | None], request_ids: Sequence[str]) -> Attribution:
    """The attribution of ``request_ids`` from each replica's log text (replica K's at index
    K, ``None`` for a replica without one); a request named twice by one log counts once."""
    known = set(request_ids)
    seen: dict[str, list[int]] = {}
    foreign = 0
    for replica, text in enumerate(logs):
        for match in RECEIVED.finditer(text or ""):
            rid = record_id(match.group("id"), known)
            if rid is None:
                foreign += 1
            elif replica not in seen.setdefault(rid, []):
                seen[rid].append(replica)
    return Attribution(
        replica_of={rid: ks[0] for rid, ks in seen.items() if len(ks) == 1},
        on_several={rid: tuple(sorted(ks)) for rid, ks in seen.items() if len(ks) > 1},
        without_log=tuple(k for k, text in enumerate(logs) if text is None),
        foreign=foreign,
    )


def read_attribution(cdir: Path, replicas: int, request_ids: Sequence[str]) -> Attribution:
    """:func:`attribute` over the ``vllm_requests.log`` of each of the case's ``replicas``
    (case directory ``cdir``; ``replica_dir``); an unreadable file counts as none."""
    logs: list[str | None] = []
    for k in range(replicas):
        try:
            logs.append((replica_dir(cdir, k) / REQUEST_LOG).read_text(errors="replace"))
        except OSError:
            logs.append(None)
    return attribute(logs, request_ids)


@dataclass(frozen=True)
class Placement:
    """Which replica served each request of a case: ``replicas[i]`` for request i (``None``
    for one that reached none), or ``replicas`` ``None`` when unknown; ``basis`` says where
    it was read from, or why it is unknown."""

    replicas: list[int | None] | None
    basis: str


def evidence_placement(
    cdir: Path, fleet: FleetData, rows: tuple[Sequence[str | None], Sequence[str], Sequence[bool]]
) -> Placement:
    """The placement the evidence gives (sources 1 and 2 of the module doc; no model):
    ``rows`` = per request its gateway upstream (a replica URL or ``None``), its request id
    and whether it ended ``ok``; ``replicas`` ``None`` and ``basis`` why when unknown."""
    upstreams, request_ids, answered = rows
    index = {url.rstrip("/"): k for k, url in enumerate(fleet.replica_urls)}
    named = [index.get(u.rstrip("/")) if isinstance(u, str) else None for u in upstreams]
    if named and all(k is not None for k in named):
        return Placement(list(named), "the gateway's answers (X-Gateway-Upstream)")
    why = f"which replica served each request is unknown under {fleet.routing}"
    if fleet.routing.startswith("vllm-router:"):
        logged = read_attribution(cdir, fleet.replicas, request_ids)
        placed, why = logged.placements(request_ids, answered)
        if placed is not None:
            return Placement(placed, why)
    return Placement(None, why)


def case_placement(
    cdir: Path,
    fleet: FleetData,
    rows: tuple[Sequence[str | None], Sequence[str], Sequence[bool]],
    requests: Sequence[FleetRequest],
    events: Sequence[tuple[str, int]],
    capacity: tuple[int, int],
) -> Placement:
    """The placement of a fleet case's sent requests (module doc): the evidence's
    (:func:`evidence_placement`, same ``rows``), else the model's where it is exact, for
    ``requests`` with their measured start/end ``events`` on replicas of ``capacity`` =
    (usable blocks, block tokens)."""
    found = evidence_placement(cdir, fleet, rows)
    if found.replicas is not None:
        return found
    options = FleetOptions(worker_urls=fleet.replica_urls)
    model = predict_fleet(requests, fleet.replicas, capacity[0], capacity[1], [fleet.routing],
                          events, options)  # fmt: skip
    policy = model.policies[0]
    if policy.names_replicas:
        return Placement(list(policy.low.placement), f"the model's exact placement ({found.basis})")
    return found


def served_by(
    cdir: Path, fleet: FleetData, frame: pd.DataFrame
) -> tuple[dict[str, int | None] | None, str]:
    """Request id → replica (``None``: reached none) of every sent request of a case's request
    frame (``analysis.latency.request_frame``: ``request_id``, ``sent_ns``, ``upstream``,
    ``status``), from the evidence alone (:func:`evidence_placement`) and its basis; ``None``
    and why when unknown."""
    rows = frame[frame["sent_ns"].notna()] if "sent_ns" in frame else frame.iloc[0:0]
    ids = [str(i) for i in rows["request_id"]] if "request_id" in rows else []
    upstreams = list(rows["upstream"]) if "upstream" in rows else [None] * len(ids)
    answered = [s == "ok" for s in rows["status"]] if "status" in rows else [True] * len(ids)
    found = evidence_placement(cdir, fleet, (upstreams, ids, answered))
    if found.replicas is None:
        return None, found.basis
    return dict(zip(ids, found.replicas, strict=True)), found.basis


def served_per_replica(placed: Sequence[int | None], replicas: int) -> list[int]:
    """Requests each of ``replicas`` served, replica 0 first, counted request by request."""
    return [sum(1 for p in placed if p == k) for k in range(replicas)]
