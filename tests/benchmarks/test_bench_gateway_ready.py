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
