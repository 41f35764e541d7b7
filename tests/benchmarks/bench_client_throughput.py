"""Benchmark 1: client throughput, ours vs vLLM's request function, same run, same server.

2,048 requests × 256 streamed chunks against the zero-delay fake (``sse_server.py``, own
process, own core), at 64 and 256 in flight; ours and the anchor alternate (A B A B) for
3 rounds. Per run: chunks/s and requests/s (first send to last token), the client's CPU
seconds, and the server's CPU share (it must stay far from 100 %: then it is not the
bottleneck). Target: ours ≥ 1.5× the anchor's chunks/s (median of rounds). Chunks per client
CPU-second are shown too: they do not move when other processes take the core for a while.
Run: ``python tests/benchmarks/bench_client_throughput.py [--tiny] [--out DIR]``.
"""

from __future__ import annotations

from typing import Any

import harness as h
from anchors import vllm_client

NAME = "client_throughput"
TARGET = 1.5


def run(tiny: bool) -> dict[str, Any]:
    n, tokens = (64, 16) if tiny else (2048, 256)
    levels = (8,) if tiny else (64, 256)
    rounds = 1 if tiny else 3
    have_anchor = vllm_client() is not None
    clients = {"ours": h.ours, **({"anchor": h.anchor} if have_anchor else {})}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    with h.FakeServer() as server:
        server.configure(0, 0)

        async def measure() -> None:
            for c in levels:
                per = runs.setdefault(str(c), {k: [] for k in clients})
                for _ in range(rounds):
                    for name, client in clients.items():
                        cpu0 = server.cpu_s()
                        out = await client(server.url, n, concurrency=c, max_tokens=tokens)
                        server_cpu = server.cpu_s() - cpu0
                        assert out.failed == 0, f"{name}: {out.failed} requests failed"
                        per[name].append(
                            {
                                "chunks_per_s": out.chunks / out.wall_s,
                                "requests_per_s": n / out.wall_s,
                                "client_cpu_s": out.cpu_s,
                                "chunks_per_cpu_s": out.chunks / out.cpu_s,
                                "server_cpu_share": server_cpu / out.wall_s,
                                "wall_s": out.wall_s,
                            }
                        )
                        h.progress(
                            f"  {c} in flight, {name}: {out.chunks / out.wall_s:,.0f} "
                            f"chunks/s, server CPU {server_cpu / out.wall_s:.0%}"
                        )

        h.run_loop(measure())
    rows = []
    summary: dict[str, Any] = {}
    for c, per in runs.items():
        summary[c] = {
            name: {k: h.spread([r[k] for r in rs], 3 if "share" in k else 1) for k in rs[0]}
            for name, rs in per.items()
        }
        ours_med = summary[c]["ours"]["chunks_per_s"]["median"]
        anchor_med = summary[c]["anchor"]["chunks_per_s"]["median"] if have_anchor else None
        r = h.ratio(ours_med, anchor_med)
        rows.append(
            h.row(
                f"chunks/s, {c} in flight",
                ours_med,
                anchor_med,
                f"≥ {TARGET}×",
                None if r is None else r >= TARGET,
                "chunks/s",
            )
        )
        ours_rps = summary[c]["ours"]["requests_per_s"]["median"]
        anchor_rps = summary[c]["anchor"]["requests_per_s"]["median"] if have_anchor else None
        rows.append(h.row(f"requests/s, {c} in flight", ours_rps, anchor_rps, "", None, "req/s"))
        # CPU time does not run while a process waits for its core, so this one stays the
        # same when other processes share the machine (wall-clock figures do not).
        ours_cpu = summary[c]["ours"]["chunks_per_cpu_s"]["median"]
        anchor_cpu = summary[c]["anchor"]["chunks_per_cpu_s"]["median"] if have_anchor else None
        rows.append(
            h.row(
                f"chunks per client CPU-second, {c} in flight",
                ours_cpu,
                anchor_cpu,
                "",
                None,
                "chunks/CPU-s",
            )
        )
    return {
        "config": {
            "requests": n,
            "chunks_per_request": tokens,
            "in_flight": list(levels),
            "rounds": rounds,
        },
        "anchor_available": have_anchor,
        "rows": rows,
        "runs": runs,
        "summary": summary,
    }


if __name__ == "__main__":
    h.bench_main(NAME, run)
