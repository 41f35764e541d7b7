"""loadgen.workers.ray: a phase sent by Ray actors on the two nodes of a local Ray cluster
(``ray.cluster_utils.Cluster``, both "nodes" on this machine) against the in-process fake vLLM.

Worker 1's clock is shifted 1000 s ahead (``ShiftedClock``), standing in for another host whose
monotonic clock counts from another origin: the offsets measured before the phase must find
that shift (within their bound), and the merged records must land on the coordinator's clock.
The fake answers five requests, all of worker 1's, after 500 ms and every other after 10 ms:
the example of a pooled p99 that averaging per-worker p99s would halve.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from analysis.latency import request_frame
from analysis.summaries import stats
from loadgen.client import Target
from loadgen.clock import MonotonicClock
from loadgen.placement import Placement
from loadgen.runformat.layout import CLOCK_OFFSETS_FILE, append_jsonl, worker_requests_file
from loadgen.runformat.record_files import read_records
from loadgen.workers.base import ClockOffset
from loadgen.workers.process import run_split_phase
from scenarios.arrivals import ClosedLoop
from scenarios.plan import PhaseSpec
from scenarios.tokens import TokenSpace
from scenarios.workloads import UniquePrompts, materialize
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

ray = pytest.importorskip(
    "ray", reason="Ray is not installed (pip install '.[ray]'; make test installs it)"
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="session")]

AHEAD_NS = 1_000 * 1_000_000_000
SLOW = (1, 3, 5, 7, 9)  # request indices answered after 500 ms: all on worker 1 (see below)


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, logging_level=logging.WARNING, log_to_driver=False)
    nodes.wait_for_nodes()
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


async def test_phase_on_two_ray_nodes_merges_records_pools_percentiles_applies_offsets(
    cluster: object, tmp_path: Path
) -> None:
    from loadgen.workers.ray import RayWorkers

    # 200 requests at concurrency 4 over 2 workers: slots 0, 2 → worker 0 (even indices),
    # slots 1, 3 → worker 1 (odd ones), 100 each; the slow indices 1, 3, 5, 7, 9 are odd.
    phase = PhaseSpec(
        name="p",
        workload=UniquePrompts(prompt_tokens=8, requests=200, output_tokens=2),
        arrival=ClosedLoop(concurrency=4),
    )
    planned = materialize(phase.workload, "p", 0, TokenSpace())
    slow = {tuple(planned[i].prompt_token_ids) for i in SLOW}
    script = StreamScript(ttft_for=lambda body: 0.5 if tuple(body["prompt"]) in slow else 0.01)
    offsets: list[ClockOffset] = []
    async with FakeOpenAIServer(script, keep_seen=False).serve() as fake:
        # Both "nodes" are this machine: the actors place themselves as asked (both on the
        # last core, sharing it at normal priority).
        core = max(os.sched_getaffinity(0))
        pool = await RayWorkers.start(
            "auto", 2, tmp_path, pool_limit=4, read_timeout_s=30, clock_shifts_ns=[0, AHEAD_NS],
            placement=Placement(True, (core,), "test"),
        )  # fmt: skip
        try:
            placed = await pool.placements()
            nodes = pool.nodes()
            before = time.monotonic_ns()
            split = await run_split_phase(
                pool, case="c", phase=phase, seed=0, tokens=TokenSpace(),
                target=Target(fake.url, "m"), clock=MonotonicClock(), on_offsets=offsets.extend,
            )  # fmt: skip
            after = time.monotonic_ns()
            await pool.gather_records(tmp_path)
        finally:
            await pool.close()
    for o in offsets:  # as the orchestrator writes them
        append_jsonl(tmp_path / CLOCK_OFFSETS_FILE, o.as_row("p"))

    assert len(set(nodes)) == 2, nodes  # one worker on each node
    assert [(a.policy, a.cpus) if a else None for a in placed] == [("SCHED_OTHER", [core])] * 2
    assert split.errors == [] and split.statuses == {"ok": 200}

    # Offsets were measured (one per worker) and found the shift within their bound: worker
    # 0 shares the coordinator's clock (true offset 0), worker 1 runs 1000 s ahead.
    assert [o.worker for o in offsets] == [0, 1]
    for o, true_ns in zip(offsets, (0, AHEAD_NS), strict=True):
        assert o.samples == 16 and 0 < o.bound_ns == o.rtt_ns // 2
        assert abs(o.offset_ns - true_ns) <= o.bound_ns

    merged = read_records(tmp_path)
    assert merged.workers == 2 and len(merged.records) == 200
    assert sorted(r.index for r in merged.records) == list(range(200))
    assert sum(r.worker == 1 for r in merged.records) == 100
    # Applied: every merged stamp is on the coordinator's clock (within the bound), while
    # worker 1's own file keeps its clock, 1000 s ahead.
    bound = max(o.bound_ns for o in offsets)
    assert all(before - bound <= r.sent_ns <= after + bound for r in merged.records)
    assert split.timing.start_ns == min(r.sent_ns for r in merged.records)
    raw = read_records_raw(tmp_path / worker_requests_file(1))
    assert min(raw) > after + AHEAD_NS // 2

    # Pooled p99 over all 200 TTFTs (numpy linear interpolation at 0.99 × 199 = 197.01:
    # between the 198th and 199th smallest, both among the five ≥ 500 ms): at least 500 ms.
    frame = request_frame(merged.records)
    pooled = stats(frame["ttft_ms"])
    assert pooled.count == 200
    assert 500 <= pooled.p99 < 600  # type: ignore[operator]
    # Worker 0's own p99 is a fast request's; an average of per-worker p99s would be about
    # (10 + 500) / 2 = 255 ms.
    own = stats(frame[frame["worker"] == 0]["ttft_ms"]).p99
    assert own is not None and own < 100
    assert float(np.percentile(frame["ttft_ms"], 50)) < 100


def read_records_raw(path: Path) -> list[int]:
    import json

    return [json.loads(line)["sent_ns"] for line in path.read_text().splitlines()]
