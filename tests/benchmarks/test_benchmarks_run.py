"""The benchmarks run end to end on tiny sizes and write their JSON (no timing is asserted).

All six run side by side (smoke sizes, unpinned) as ``make bench`` runs each of them; then
every JSON file is checked for its shape, and ``RESULTS.md`` is rendered from them. nginx and
vllm-router are not needed: without one the gateway benchmark records it as unavailable; when
one is installed, its figures must be there.
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
#: A row may also name its anchor (the gateway's rows: nginx or vllm-router).
OPTIONAL_ROW_KEYS = {"anchor_name"}


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
        assert ROW_KEYS <= set(row) <= ROW_KEYS | OPTIONAL_ROW_KEYS, row
        assert isinstance(row["ours"], int | float), row
        if row["anchor"] is None:
            assert row["ratio"] is None
        assert row["met"] in (True, False, None)


def test_gateway_anchor_is_nginx_or_recorded_unavailable(
    results: dict[str, dict[str, Any]],
) -> None:
    gateway = results["gateway"]
    assert gateway["anchor_available"] is gateway["anchors"]["nginx"]["available"]
    nginx_rows = [row for row in gateway["rows"] if row["anchor_name"] == "nginx"]
    if gateway["anchor_available"]:
        assert "nginx" in gateway["capacity"]
        assert all(isinstance(row["anchor"], int | float) for row in nginx_rows)
    else:
        assert all(row["anchor"] is None for row in nginx_rows)
        assert all(row["met"] is not False or row["ours"] > 1.0 for row in nginx_rows)


@pytest.mark.parametrize("proxy", ["nginx", "vllm-router"])
def test_gateway_measures_each_installed_proxy_beside_ours(
    results: dict[str, dict[str, Any]], proxy: str
) -> None:
    gateway = results["gateway"]
    about = gateway["anchors"][proxy]
    rows = [row for row in gateway["rows"] if row["anchor_name"] == proxy]
    # Per streams level (1 and 4 at --tiny): added TTFT and E2EL, p50 and p99; then streams/s.
    suffix = "" if proxy == "nginx" else f", vs {proxy}"
    expected = [
        f"added {figure} {q}, {c} streams{suffix}"
        for c in ("1", "4")
        for figure in ("TTFT", "E2EL")
        for q in ("p50", "p99")
    ] + [f"streams/s through one proxy process{suffix}"]
    assert [row["metric"] for row in rows] == expected
    # Installed means measured: a proxy that is installed but did not start fails here.
    assert about["available"] is about["installed"], about["why_unavailable"]
    if about["installed"]:
        assert about["binary"] and about["why_unavailable"] is None
        assert all(isinstance(row["anchor"], int | float) for row in rows), rows
        assert all(row["ratio"] is not None or row["anchor"] == 0 for row in rows)
        assert proxy in gateway["capacity"]
        for c in ("1", "4"):
            assert set(gateway["summary"][c][proxy]["added"]) >= {"ttft_ms_p50", "e2el_ms_p99"}
            # Its CPU in the latency runs: a process that relayed streams ran and woke up.
            cost = gateway["proxy_cost"][c][proxy]
            assert cost["cpu_us_per_request"] > 0 and cost["wakeups_per_request"] > 0
            per_wakeup = cost["cpu_us_per_request"] / cost["wakeups_per_request"]
            assert abs(cost["cpu_us_per_wakeup"] - per_wakeup) <= 0.05 * per_wakeup + 0.1
    else:
        assert about["why_unavailable"], "an unavailable proxy says why"
        assert all(row["anchor"] is None and row["ratio"] is None for row in rows)
        assert proxy not in gateway["capacity"]
    if proxy != "nginx":  # a peer: no target of its own
        assert all(row["target"] == "" and row["met"] is None for row in rows)


def test_results_md_has_one_line_per_figure(results: dict[str, dict[str, Any]]) -> None:
    machine = results["client_throughput"]["machine"]
    text = report.render(list(results.values()), machine, 1.0, tiny=True, lock=False)
    figures = sum(len(r["rows"]) for r in results.values())
    summary = text.split("## Summary")[1].split("\n## ")[0]
    # The table's header and separator, then one line per figure.
    assert sum(line.startswith("| ") for line in summary.splitlines()) == figures + 1
    assert machine["cpu_model"] in text
    assert "NOT held" in text
    # The gateway's proxies side by side, and each anchor's rows named by their proxy.
    assert "| streams | figure | gateway | nginx | vllm-router |" in text
    for proxy, about in results["gateway"]["anchors"].items():
        assert (f"({proxy})" if about["available"] else f"{proxy} unavailable") in summary


def test_a_paced_level_missed_once_is_tried_again_before_it_ends_the_ladder(
    results: dict[str, dict[str, Any]],
) -> None:
    for client, levels in results["client_throughput"]["capacity"].items():
        assert levels, client
        for i, level in enumerate(levels):
            tries = level["tries_p99"]
            assert 1 <= len(tries) <= 2
            assert level["held"] is (tries[-1] is not None and tries[-1] <= 1.0)
            assert all(t is None or t > 1.0 for t in tries[:-1])  # only a miss is retried
            if not level["held"]:
                assert len(tries) == 2 and i == len(levels) - 1  # missed twice: the ladder ends
