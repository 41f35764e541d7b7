"""Deleting ``manifest.json`` does not launder a hand-edited run: ``loadgen report`` seals a run
without a manifest only with a re-seal that says so, ``validate`` then says it needs attention
(exit 4), and ``compare`` counts it incomplete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.compare import CompareError, compare_paths
from analysis.gate_file import load_gate
from analysis.report import build_report
from loadgen.cli import main
from loadgen.runformat.layout import MANIFEST_FILE, REPORT_JSON, REPORT_MD, case_dir, read_json
from loadgen.runformat.manifest import UNVERIFIED_SEAL_REASON, write_manifest
from server.net.exit_codes import ValidateExit
from tests.support.synthetic_run import TEST_CASE, build_run

COMMAND = ["loadgen", "run", "prefix-eviction"]


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("sealed")
    build_run(run_dir)
    build_report(run_dir)
    write_manifest(run_dir, "ok", COMMAND)  # as `loadgen run` seals the runs it ends
    return run_dir


@pytest.fixture
def run(sealed: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(sealed, copy)
    return copy


def _squeeze_first_record(run_dir: Path) -> None:
    """Hand-edit cold-0000's chunk stamps to 1 ns apart: still in order and inside its phase
    (first chunk unchanged, end 1 ms after the old last chunk), so no check of the records
    alone can tell; its TPOT (last − first) / (4 − 1) goes from 30 ms / 3 = 10 ms to 1 ns."""
    path = case_dir(run_dir, TEST_CASE) / "requests.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    c0 = first["chunk_ns"][0]
    assert first["chunk_ns"] == [c0 + i * 10_000_000 for i in range(4)]
    first["chunk_ns"] = [c0, c0 + 1, c0 + 2, c0 + 3]
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")


def test_a_hand_edited_run_without_its_manifest_is_sealed_with_a_trace(run: Path) -> None:
    _squeeze_first_record(run)
    (run / MANIFEST_FILE).unlink()
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert f"resealed: {UNVERIFIED_SEAL_REASON}" in result.output
    [entry] = read_json(run / MANIFEST_FILE)["resealed"]  # type: ignore[misc]
    assert (entry["reason"], entry["changed"]) == (
        "sealed without a manifest: raw files not verifiable",
        [f"{MANIFEST_FILE} was missing although run.json says the run ended (status ok) "
         "and `loadgen run` seals the runs it ends"],
    )  # fmt: skip
    at = entry["at"]
    assert read_json(run / REPORT_JSON)["run"]["resealed"] == [entry]
    assert f"**Resealed** at {at}: {UNVERIFIED_SEAL_REASON}" in (run / REPORT_MD).read_text()
    checked = CliRunner().invoke(main, ["validate", str(run)])
    assert checked.exit_code == ValidateExit.ATTENTION == 4, checked.output
    assert checked.output.splitlines()[-1] == (
        f"valid, needs attention: resealed at {at}: {UNVERIFIED_SEAL_REASON}"
    )
    # A later rebuild keeps the trace (the files now match the manifest that holds it).
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    assert read_json(run / MANIFEST_FILE)["resealed"] == [entry]
    assert CliRunner().invoke(main, ["validate", str(run)]).exit_code == 4


def test_compare_counts_a_run_sealed_without_a_manifest_incomplete(sealed: Path, run: Path) -> None:
    _squeeze_first_record(run)
    (run / MANIFEST_FILE).unlink()
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    [entry] = read_json(run / MANIFEST_FILE)["resealed"]  # type: ignore[misc]
    why = f"candidate run {run} ({UNVERIFIED_SEAL_REASON} (at {entry['at']}))"
    with pytest.raises(CompareError, match="incomplete") as caught:
        compare_paths(sealed, run, load_gate())
    assert why in str(caught.value)
    marked = compare_paths(sealed, run, load_gate(), allow_incomplete=True)
    assert marked.metrics and all(m.incomplete for m in marked.metrics)


def test_a_killed_run_sealed_by_report_says_it_never_ended(run: Path) -> None:
    # A run killed before its end: run.json still says "running" and there is no manifest.
    info = json.loads((run / "run.json").read_text())
    info["status"] = "running"
    (run / "run.json").write_text(json.dumps(info))
    (run / MANIFEST_FILE).unlink()
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    [entry] = read_json(run / MANIFEST_FILE)["resealed"]  # type: ignore[misc]
    assert entry["changed"] == [
        f"{MANIFEST_FILE} was missing: run.json says the run never ended (status running)"
    ]
    assert CliRunner().invoke(main, ["validate", str(run)]).exit_code == 4


def test_a_run_sealed_with_its_manifest_gets_no_trace(run: Path) -> None:
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    assert read_json(run / MANIFEST_FILE)["resealed"] == []
    assert CliRunner().invoke(main, ["validate", str(run)]).exit_code == 0


def test_the_unverified_seal_reads_as_what_was_missing_and_validate_prints_plain_facts(
    run: Path,
) -> None:
    (run / MANIFEST_FILE).unlink()
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    [entry] = read_json(run / MANIFEST_FILE)["resealed"]  # type: ignore[misc]
    [line] = [x for x in (run / REPORT_MD).read_text().splitlines() if x.startswith("**Resealed")]
    # No "no longer matched the manifest": there was none to match.
    assert line == (
        f"**Resealed** at {entry['at']}: sealed without a manifest: raw files not verifiable "
        "(manifest.json was missing although run.json says the run ended (status ok) and "
        "`loadgen run` seals the runs it ends)"
    )
    checked = CliRunner().invoke(main, ["validate", str(run)])
    # The synthetic run: 29 requests per case (cold 6, warm 6, pollution 5, revisit 6,
    # rewarm 6), none failed; facts print as words, not as a Python dict.
    assert checked.output.splitlines()[:2] == [
        f"{TEST_CASE}: status ok, requests 29, failed 0",
        "control-7GiB: status ok, requests 29, failed 0",
    ]
