"""analysis.load merges the record files of a phase split across workers: every reader (report,
validate, compare) sees one pooled set of records, on the coordinator's clock.

The synthetic run (``synthetic_run``) is written twice, once as one process writes it
(``requests.jsonl``) and once as two workers would (request j of each phase in worker
j mod 2's file, worker 1's clock 1000 s ahead, said so in ``clock_offsets.jsonl``): the same
requests at the same true times, so every figure must come out the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.compare import compare_paths
from analysis.gate_file import load_gate
from analysis.latency import request_frame
from analysis.load import load_run
from analysis.report import summarize
from analysis.summaries import stats
from analysis.validate import validate_run
from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat import ReadRecord
from loadgen.runformat.layout import REPORT_JSON, case_dir, worker_requests_file
from loadgen.runformat.manifest import write_manifest
from loadgen.runformat.record_files import read_records
from tests.support.synthetic_run import TEST_CASE, Options, build_run

MS = 1_000_000
AHEAD_NS = 1_000 * 1_000_000_000  # worker 1's clock: 1000 s ahead of the coordinator's


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    single = tmp_path_factory.mktemp("single")
    split = tmp_path_factory.mktemp("split")
    build_run(single)
    build_run(split, Options(workers=2, worker_clock_ahead_ns=AHEAD_NS))
    return single, split


def _by_id(records: list[ReadRecord]) -> dict[str, ReadRecord]:
    return {f"{r.phase}/{r.request_id}": r for r in records}


def test_worker_files_merge_into_the_records_one_process_writes(runs: tuple[Path, Path]) -> None:
    single, split = runs
    one = _by_id(read_records(case_dir(single, TEST_CASE)).records)
    merged_files = read_records(case_dir(split, TEST_CASE))
    two = _by_id(merged_files.records)
    assert merged_files.workers == 2
    assert two.keys() == one.keys()
    # Worker 1's stamps were written 1000 s ahead; after the offset every stamp is the
    # coordinator's again, equal to what one process recorded.
    for key, rec in two.items():
        for field in ("scheduled_ns", "sent_ns", "end_ns", "chunk_ns"):
            assert getattr(rec, field) == getattr(one[key], field), (key, field)
    assert {r.worker for r in two.values()} == {0, 1}
    # Raw worker-1 files keep the worker's own clock (the correction is the reader's).
    raw = json.loads((case_dir(split, TEST_CASE) / worker_requests_file(1)).open().readline())
    assert raw["sent_ns"] == two[f"{raw['phase']}/{raw['request_id']}"].sent_ns + AHEAD_NS


def test_report_of_a_split_run_equals_the_single_process_report(runs: tuple[Path, Path]) -> None:
    single, split = runs
    a, b = summarize(single), summarize(split)
    assert a["verdicts"] == b["verdicts"]
    for case in a["cases"]:
        for phase, pa in a["cases"][case]["phases"].items():
            pb = b["cases"][case]["phases"][phase]
            for key in ("requests", "ok", "cached_tokens", "ttft_ms", "tpot_ms", "e2el_ms",
                        "itl_ms", "counter_deltas", "server_in_flight_peak"):  # fmt: skip
                assert pa[key] == pb[key], (case, phase, key)
    assert a["details"] == b["details"]  # probes, hit rates: scenario report too


def test_validate_and_compare_read_the_merged_records(runs: tuple[Path, Path]) -> None:
    single, split = runs
    for run_dir in runs:
        (run_dir / REPORT_JSON).write_text(json.dumps(summarize(run_dir)) + "\n")
        write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    result = validate_run(split)
    assert result.ok, result.problems
    assert result.facts[TEST_CASE]["requests"] == validate_run(single).facts[TEST_CASE]["requests"]
    assert result.facts[TEST_CASE]["workers"] == 2
    comparison = compare_paths(single, split, load_gate(None))
    # The same requests on both sides: nothing may differ beyond the bootstrap's noise.
    assert not [m for m in comparison.metrics if m.classification == "regression"]
    assert len(load_run(split).cases[0].records) == len(load_run(single).cases[0].records)


def _write(path: Path, ttfts_ms: list[int]) -> None:
    with RecordWriter(path) as writer:
        for i, ttft in enumerate(ttfts_ms):
            sent = 10_000 * MS + i * 1_000 * MS
            end = sent + ttft * MS
            writer.write(
                RequestRecord(
                    request_id=f"{path.stem}-{i}",
                    case="c",
                    phase="p",
                    index=i,
                    group=None,
                    prompt_tokens_sent=8,
                    max_tokens=1,
                    scheduled_ns=sent,
                    sent_ns=sent,
                    chunk_ns=[end],
                    chunk_tokens=[1],
                    end_ns=end,
                    status="ok",
                )
            )


def test_percentiles_are_pooled_over_workers_never_averaged(tmp_path: Path) -> None:
    # A pooled p99 that averaging per-worker p99s gets wrong. Worker 0: 100 requests of TTFT
    # 10 ms; worker 1: 95 of 10 ms and 5 of 500 ms. Percentiles are numpy's linear
    # interpolation (analysis.latency.describe): p99 of m sorted values sits at position
    # 0.99 × (m − 1).
    # Pooled: m = 200, position 0.99 × 199 = 197.01, between sorted values 197 and 198; the 5
    # largest (positions 195–199) are 500 ms, so p99 = 500 ms.
    # Averaged per worker it would be (10 + 500) / 2 = 255 ms: worker 0's p99 is 10, worker
    # 1's (position 0.99 × 99 = 98.01, inside its 5 values of 500 at 95–99) is 500.
    _write(tmp_path / worker_requests_file(0), [10] * 100)
    _write(tmp_path / worker_requests_file(1), [10] * 95 + [500] * 5)
    merged = read_records(tmp_path)
    assert merged.workers == 2
    assert len(merged.records) == 200
    ttft = stats(request_frame(merged.records)["ttft_ms"])
    assert ttft.count == 200
    assert ttft.p99 == 500.0
    assert ttft.p50 == 10.0
    # Mean over all 200: (195 × 10 + 5 × 500) / 200 = 22.25 ms.
    assert ttft.mean == pytest.approx(22.25)
