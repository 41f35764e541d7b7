"""A scraper that cannot write its files fails the case with its one line (loadgen.execute)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.run import run_scenario
from scenarios.bench import Bench, BenchParams
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(120)]


@pytest.mark.asyncio
async def test_a_full_disk_under_the_scraper_fails_the_case_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    metrics = run_dir / "cases/attached/metrics"
    metrics.mkdir(parents=True)
    (metrics / "samples.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
    fake = FakeOpenAIServer(StreamScript())
    async with fake.serve():
        params = BenchParams(
            url=fake.url, requests=2, concurrency="1", input_len=4, output_len=2, settle_s=0.2,
            scrape_interval_s=0.1,
        )  # fmt: skip
        result = await run_scenario(Bench(), params, run_dir)
    # The run's one write error (server.net.jsonl), as the scraper's one line.
    line = (
        f"metrics scraper: cannot write {metrics}/samples.jsonl: No space left on device (ENOSPC)"
    )
    assert result.status == "failed"
    assert result.error == f"attached: {line}"
    assert fake.served == 0  # no load was sent without metrics
    assert "Traceback" not in capfd.readouterr().err
