"""Benchmark 2: client timing error, ours vs vLLM's request function, same run, same server.

The fake server (own process, own core) answers with TTFT 50 ms and 10 ms between tokens
(16–48 tokens, mean 32, varied per request so the streams desynchronize), on absolute
deadlines it spins to, and logs when it read each request and wrote its first and last token
on the monotonic clock both clients stamp with. At 1, 64 and 256 concurrent streams (closed
loop, pool warmed), ours and the anchor alternate for 2 rounds. The first wave of a run (its
first C requests, sent at once) is reported apart from the rest: sending C requests at once
is a burst of client work that the steady state does not have.

Per client and level: recorded TTFT − 50 ms and ITL − 10 ms (p50/p99), and where each TTFT
went, per request (ms): ``to_server`` = server read − client send stamp (the send path, the
request on the wire, the server's accept), ``server`` = server first write − server read (its
own TTFT; 50 ms plus its lateness), ``to_client`` = client first-token stamp − server first
write (the bytes on the wire, the client's loop and parsing). Ours adds its traced stamps:
connection ready, request written, response headers (all ms after the send stamp).
Target: our p99 TTFT error ≤ 2 ms at 256 streams.
Run: ``python tests/benchmarks/bench_client_timing.py [--tiny] [--out DIR]``.
"""

from __future__ import annotations

from typing import Any

import harness as h
from anchors import vllm_client

NAME = "client_timing"
TTFT_MS, ITL_MS = 50.0, 10.0
TARGET_P99_MS = 2.0


def tokens_of(i: int) -> int:
    """Request ``i``'s output length: 16–48 tokens (mean 32), spread so that streams end at
    different times and, after the first wave, neither sends nor chunks come in lockstep."""
    return 16 + (i * 7919) % 33


#: Our traced stamps, as ms after the send stamp.
TRACED = {
    "connection_ready": "connection_ready_ns",
    "request_written": "request_sent_ns",
    "headers": "headers_ns",
}


def per_request(
    name: str, out: h.Outcome, log: dict[int, dict[str, int]], concurrency: int
) -> list[dict[str, Any]]:
    """Per request: its wave (``first``: the ``concurrency`` requests sent at once when the
    run starts; ``steady``: the rest), TTFT and ITL errors, and where its TTFT went."""
    traced = {}
    if name == "ours":
        traced = {int(r["request_id"][1:]): r for r in out.records if r["status"] == "ok"}
    rows = []
    for p in out.per_request:
        row: dict[str, Any] = {
            "wave": "first" if p["index"] < concurrency else "steady",
            "ttft_error_ms": p["ttft_ms"] - TTFT_MS,
            "itl_error_ms": [x - ITL_MS for x in p["itl_ms"]],
        }
        srv = log.get(p["key"])
        if srv is not None:
            row["to_server"] = (srv["read_ns"] - p["sent_ns"]) / 1e6
            row["server"] = (srv["first_write_ns"] - srv["read_ns"]) / 1e6
            row["to_client"] = (p["first_token_ns"] - srv["first_write_ns"]) / 1e6
        record = traced.get(p["key"])
        if record is not None:
            for part, stamp in TRACED.items():
                if record[stamp] is not None:
                    row[part] = (record[stamp] - record["sent_ns"]) / 1e6
        rows.append(row)
    return rows


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [
        "ttft_error_ms",
        "itl_error_ms",
        "to_server",
        "server",
        "to_client",
        *TRACED,
    ]
    out = {}
    for key in keys:
        values = [
            x for r in rows if key in r for x in (r[key] if isinstance(r[key], list) else [r[key]])
        ]
        if values:
            out[key] = h.dist(values)
    return out


def run(tiny: bool) -> dict[str, Any]:
    levels = {1: 2, 4: 8} if tiny else {1: 12, 64: 256, 256: 768}  # streams: requests
    rounds = 1 if tiny else 2
    have_anchor = vllm_client() is not None
    clients = {"ours": h.ours, **({"anchor": h.anchor} if have_anchor else {})}
    pooled: dict[str, dict[str, list[dict[str, Any]]]] = {}
    cpu: dict[str, dict[str, list[dict[str, float]]]] = {}
    with h.FakeServer() as server:
        server.configure(TTFT_MS, ITL_MS)

        async def measure() -> None:
            first = 0
            for c, n in levels.items():
                per = pooled.setdefault(str(c), {})
                for _ in range(rounds):
                    for name, client in clients.items():
                        server.take_log()
                        out = await client(
                            server.url,
                            n,
                            concurrency=c,
                            max_tokens=tokens_of,
                            first_index=first,
                        )
                        log = {e["key"]: e for e in server.take_log()}
                        assert out.failed == 0, f"{name}: {out.failed} requests failed"
                        rows = per_request(name, out, log, c)
                        per.setdefault(name, []).extend(rows)
                        cpu.setdefault(str(c), {}).setdefault(name, []).append(
                            {
                                "cpu_share": out.cpu_s / out.wall_s,
                                "cpu_us_per_request": out.cpu_s / n * 1e6,
                                "cpu_us_per_chunk": out.cpu_s / max(out.chunks, 1) * 1e6,
                            }
                        )
                        first += n
                        steady = [r["ttft_error_ms"] for r in rows if r["wave"] == "steady"]
                        h.progress(
                            f"  {c} streams, {name}: steady TTFT error p99 "
                            f"{h.pct(steady or [0.0], 0.99):.2f} ms"
                        )

        h.run_loop(measure())
    summary = {
        c: {
            name: {
                wave: _stats([r for r in rows if r["wave"] == wave]) for wave in ("steady", "first")
            }
            for name, rows in per.items()
        }
        for c, per in pooled.items()
    }
    rows = []
    top = max(summary, key=int)
    for c in summary:
        # One stream has no steady state apart from its first request: all of its requests.
        for wave in ("steady", "first"):
            for metric, q in (
                ("ttft_error_ms", "p50"),
                ("ttft_error_ms", "p99"),
                ("itl_error_ms", "p50"),
                ("itl_error_ms", "p99"),
            ):
                if wave == "first" and metric == "itl_error_ms":
                    continue
                ours_s = summary[c]["ours"][wave].get(metric)
                anchor_s = summary[c]["anchor"][wave].get(metric) if have_anchor else None
                if ours_s is None:
                    continue
                ours_v = ours_s[q]
                anchor_v = anchor_s[q] if anchor_s else None
                is_target = (
                    metric == "ttft_error_ms" and q == "p99" and c == top and wave == "steady"
                )
                met = (ours_v is not None and ours_v <= TARGET_P99_MS) if is_target else None
                label = "TTFT" if metric.startswith("ttft") else "ITL"
                where = (
                    "first wave (all sent at once)" if wave == "first" else "after the first wave"
                )
                rows.append(
                    h.row(
                        f"{label} error {q}, {c} streams, {where}",
                        ours_v,
                        anchor_v,
                        f"≤ {TARGET_P99_MS:g} ms" if is_target else "",
                        met,
                        "ms",
                    )
                )
    return {
        "config": {
            "ttft_ms": TTFT_MS,
            "itl_ms": ITL_MS,
            "tokens": "16-48 per request (mean 32)",
            "requests": {str(c): n for c, n in levels.items()},
            "rounds": rounds,
        },
        "anchor_available": have_anchor,
        "rows": rows,
        "summary": summary,
        # The client's CPU per run (its share of its core, and per request / per chunk, all
        # of the client's work included): how busy the loop that stamps the tokens was.
        "client_cpu": {
            c: {
                name: {k: h.spread([r[k] for r in runs], 3) for k in runs[0]}
                for name, runs in per.items()
            }
            for c, per in cpu.items()
        },
    }


if __name__ == "__main__":
    h.bench_main(NAME, run)
