"""The benchmarks run end to end on tiny sizes and write their JSON (no timing is asserted).

All six run side by side (smoke sizes, unpinned) as ``make bench`` runs each of them; then
every JSON file is checked for its shape, and ``RESULTS.md`` is rendered from them. nginx is
not needed: without it the gateway benchmark records its anchor as unavailable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import report
import run_all

HERE = Path(__file__).resolve().parent
ROW_KEYS = {"metric", "unit", "ours", "anchor", "ratio", "target", "met"}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(HERE / script), "--tiny", "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, script in run_all.BENCHMARKS
    }
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{name} failed:\n{err[-3000:]}"
    return {name: json.loads((out / f"{name}.json").read_text()) for name in procs}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", [name for name, _ in run_all.BENCHMARKS])
def test_benchmark_writes_its_json(results: dict[str, dict[str, Any]], name: str) -> None:
    result = results[name]
    assert result["benchmark"] == name
    assert result["size"] == "tiny"
    assert result["machine"]["cores"] >= 1 and result["machine"]["cpu_model"]
    assert result["rows"], "every benchmark reports at least one figure"
    for row in result["rows"]:
        assert set(row) == ROW_KEYS
        assert isinstance(row["ours"], int | float), row
        if row["anchor"] is None:
            assert row["ratio"] is None
        assert row["met"] in (True, False, None)


def test_gateway_anchor_is_nginx_or_recorded_unavailable(
    results: dict[str, dict[str, Any]],
) -> None:
    gateway = results["gateway"]
    if gateway["anchor_available"]:
        assert "nginx" in gateway["capacity"]
    else:
        assert all(row["anchor"] is None for row in gateway["rows"])
        assert all(row["met"] is not False or row["ours"] > 1.0 for row in gateway["rows"])


def test_results_md_has_one_line_per_figure(results: dict[str, dict[str, Any]]) -> None:
    machine = results["client_throughput"]["machine"]
    text = report.render(list(results.values()), machine, 1.0, tiny=True, lock=False)
    figures = sum(len(r["rows"]) for r in results.values())
    summary = text.split("## Summary")[1].split("\n## ")[0]
    # The table's header and separator, then one line per figure.
    assert sum(line.startswith("| ") for line in summary.splitlines()) == figures + 1
    assert machine["cpu_model"] in text
    assert "NOT held" in text
