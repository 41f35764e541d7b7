"""The gateway benchmark's readiness wait: a proxy that exits at once is reported with its
log, so the benchmark can record it as unavailable and go on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench_gateway import _wait_ready


def test_a_proxy_that_exits_at_once_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "error.log"
    log.write_text('nginx: [emerg] unknown directive "x"\n')
    proc = subprocess.Popen(["sh", "-c", "exit 3"])
    proc.wait()
    with pytest.raises(RuntimeError) as caught:
        _wait_ready("http://127.0.0.1:9", proc, log, "nginx", timeout_s=5)
    assert str(caught.value) == (
        f'nginx exited with 3:\n{log}:\nnginx: [emerg] unknown directive "x"'
    )


def test_added_latency_is_the_quantile_of_per_request_differences() -> None:
    from bench_gateway import added_paired

    # Request (round 0, index i): E2EL direct 200, 200, 210 ms; through the proxy each is
    # 0.3 ms later, and request 1 one ITL (10 ms) late besides. The medians differ by 10.3 ms
    # (200 → 210.3); the per-request differences are 0.3, 10.3, 0.3: p50 0.3 ms, p99 by
    # linear interpolation at 0.99 × 2 = 1.98 over [0.3, 0.3, 10.3]: 0.3 + 0.98 × 10 = 10.1.
    direct = {(0, i): {"e2el_ms": v} for i, v in enumerate([200.0, 200.0, 210.0])}
    via = {(0, i): {"e2el_ms": v} for i, v in enumerate([200.3, 210.3, 210.3])}
    added = added_paired(direct, via)
    assert added["e2el_ms_p50"] == 0.3
    assert added["e2el_ms_p99"] == 10.1
    assert "ttft_ms_p50" not in added  # a leg no request measured gives no figure
