"""The built-in fleet workload: what ``loadgen run trace-replay`` (and ``loadgen trace stats``)
replay when no trace file is given.

It is made to show what a router does to a fleet's prefix caches on a small machine: 35
prefix groups (a system prompt, a document, an agent's preamble) of 5 blocks of 128 tokens
each, 175 blocks (22,400 tokens, 1.20 GiB of the embedded model's KV at 57,344 B a token)
in all: more than one 1 GiB replica holds (146 blocks, 145 usable) and less than two do.
Every request is its group's 640 tokens, then 64 tokens of its own (less than a block, so
never cached), and it generates 4 tokens: 708 tokens in all, within its prompt's sixth block,
so its own tokens store no block either. Few output tokens and a request every 600 ms keep
each replica's engine (one core each here) well under full load, so the routers' placement,
not queueing, decides what is measured.

The requests visit the groups in turn, 0, 1, …, 34, three rounds (105 requests), one every
:data:`INTERVAL_MS`. With 2 replicas, the number of groups being odd is what makes
round-robin spread every group over both: request k goes to replica k mod 2 and is of group
k mod 35, so each replica sees every group, in turn, every 70 requests (with an even number
of groups each replica would see only half of them and round-robin would look prefix-aware).

Predicted with 2 replicas of 1 GiB, requests one after another (``loadgen trace stats
--replicas 2 --cache 1GiB``; derived by hand in the tests):

- **round-robin** (and least-loaded, and anything blind to prefixes that alternates): 0. A
  replica sees the other 34 groups (170 blocks > 145) between two visits of one group, and
  vLLM's cache is LRU: every visit finds its group evicted;
- **prefix-hash** (and the pooled bound, one cache of 290 blocks): each group stays on one
  replica, whose share of the groups fits it (a replica holding up to 29 groups, 145 blocks,
  keeps them all), so every visit after the first hits its group's 640 tokens: 70 × 640 ÷
  (105 × 704) = 0.6061.
"""

from __future__ import annotations

import hashlib
import json

from scenarios.traces import Trace, TraceRequest

#: The name the built-in workload goes by where a trace's path would be (plans, reports).
BUILTIN_FLEET_WORKLOAD = "builtin:fleet"
#: Prompt tokens per hash id of the workload: vLLM CPU's KV block, so that a group's hash
#: ids are exactly its cached blocks.
BLOCK_TOKENS = 128
GROUPS = 35
GROUP_BLOCKS = 5
OWN_TOKENS = 64
OUTPUT_TOKENS = 4
ROUNDS = 3
#: Milliseconds between two requests' arrivals at speedup 1.
INTERVAL_MS = 600
#: Hash ids of the requests' own tokens start here, above every group block's.
OWN_HASH_BASE = 1_000_000


def fleet_workload_jsonl() -> str:
    """The workload as a Mooncake trace file's text: one JSON line per request (``timestamp``
    ms, ``input_length``, ``output_length``, ``hash_ids`` of :data:`BLOCK_TOKENS` tokens),
    request k of group k mod :data:`GROUPS` at k × :data:`INTERVAL_MS`."""
    lines = []
    for k in range(GROUPS * ROUNDS):
        group = k % GROUPS
        hash_ids = [group * GROUP_BLOCKS + b for b in range(GROUP_BLOCKS)] + [OWN_HASH_BASE + k]
        row = {
            "timestamp": k * INTERVAL_MS,
            "input_length": GROUP_BLOCKS * BLOCK_TOKENS + OWN_TOKENS,
            "output_length": OUTPUT_TOKENS,
            "hash_ids": hash_ids,
        }
        lines.append(json.dumps(row, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def fleet_workload_trace() -> Trace:
    """The workload as a trace, as :func:`scenarios.traces.load_trace` would read
    :func:`fleet_workload_jsonl` from a file: path :data:`BUILTIN_FLEET_WORKLOAD`, the sha256
    of the text's UTF-8 bytes, requests in order (line k + 1 is request k)."""
    text = fleet_workload_jsonl()
    requests = []
    for line, row in enumerate((json.loads(x) for x in text.splitlines()), start=1):
        requests.append(
            TraceRequest(line=line, timestamp_ms=float(row["timestamp"]),
                         input_length=row["input_length"], output_length=row["output_length"],
                         hash_ids=tuple(row["hash_ids"]))
        )  # fmt: skip
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Trace(BUILTIN_FLEET_WORKLOAD, digest, "mooncake", BLOCK_TOKENS, tuple(requests))
