"""The scraper's peak RSS against a ``/metrics`` answering 50 MB pages for 10 s.

A one-off measurement, not part of ``run_all``: it runs the scraper process of the tree it is
started from (``cwd``), so the same script measures the bounded code and the old one:

    cd /work/wt/int-bounds && .venv/bin/python tests/benchmarks/metrics_page_rss.py OUT
    cd /work/main && .venv/bin/python /work/wt/int-bounds/tests/benchmarks/metrics_page_rss.py OUT

``PAGE_MB`` (default 50) sets the page size (a small vLLM-shaped page, then 1 MiB comment
lines, chunked); ``MAXB`` passes ``max_bytes`` to the scraper (bounded code only). Prints the
scraper's ``VmHWM``, the size of ``raw.jsonl.gz`` and the tick outcomes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the tree under test, not the one this file is in

from aiohttp import web

from metrics.scraper import ScraperProcess

SMALL = 'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
LINE = b"# " + b"x" * (2**20 - 3) + b"\n"


async def _metrics(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(SMALL.encode())
    try:
        for _ in range(int(os.environ.get("PAGE_MB", "50")) * 1_000_000 // len(LINE)):
            await response.write(LINE)
        await response.write_eof()
    except (ConnectionError, RuntimeError):  # the bounded scraper stopped reading and left
        pass
    return response


def _hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1])
    return 0


async def main(out: Path, seconds: float = 10.0) -> None:
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    kw = {"max_bytes": int(os.environ["MAXB"])} if "MAXB" in os.environ else {}
    scraper = ScraperProcess(f"http://127.0.0.1:{port}", out, 0.25, **kw)
    scraper.start()
    assert scraper.pid is not None
    peak = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        await asyncio.sleep(0.2)
        peak = max(peak, _hwm_kib(scraper.pid))
    await asyncio.to_thread(scraper.stop)
    await runner.cleanup()
    ticks = [json.loads(x) for x in (out / "metrics/scrapes.jsonl").read_text().splitlines()]
    outcomes = [t["outcome"] for t in ticks]
    errors = sorted({t["error"] for t in ticks if "error" in t})
    raw_mb = (out / "metrics/raw.jsonl.gz").stat().st_size / 1e6
    print(
        f"scraper peak RSS {peak / 1024:.1f} MiB; raw.jsonl.gz {raw_mb:.2f} MB; "
        f"ticks {len(outcomes)}: ok {outcomes.count('ok')}, failed {outcomes.count('failed')}, "
        f"skipped {outcomes.count('skipped')}; errors {errors}"
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
