"""``loadgen gate SCENARIO --self-test F`` stopped before both gates decided (Ctrl-C, a run not
ok) still leaves ``self_test.json``/``.md`` saying so, with what was decided before it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import loadgen.cli.gate_self_test as self_test_cli
from analysis.gate_self_test import headline, stopped_early
from loadgen.cli import main
from tests.analysis.test_gate_self_test import _look


def test_a_self_test_stopped_in_the_planted_gate_keeps_the_aa_decision_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "self"
    ran: list[str] = []

    def fake_gate(scenario: Any, gate: Any, sides: Any, gate_dir: Path, *rest: Any) -> None:
        ran.append(gate_dir.name)
        if gate_dir.name == "aa":
            _look(gate_dir, "no regression", [], pairs=2)  # decided: 2 pairs, 8.0 min
            return
        sys.exit(4)  # a run of the planted gate did not end ok (the gate's own exit)

    monkeypatch.setattr(self_test_cli, "run_gate", fake_gate)
    result = CliRunner().invoke(
        main, ["gate", "prefix-eviction", "--baseline-vllm", "0.32.0", "--self-test", "15%",
               "--out", str(out)],
    )  # fmt: skip
    assert (ran, result.exit_code) == (["aa", "planted"], 4)
    saved = json.loads((out / "self_test.json").read_text())
    assert (saved["correct"], saved["exit_code"]) == (False, 4)
    assert saved["stopped"] == (
        "gate planted stopped with exit code 4 (a run of either side did not end ok (failed "
        "or interrupted): the gate stops)"
    )
    [aa] = saved["gates"]  # the planted gate took no look: nothing is claimed for it
    assert (aa["name"], aa["headline"], aa["correct"], aa["pairs"]) == (
        "aa",
        "NO REGRESSION",
        True,
        2,
    )
    md = (out / "self_test.md").read_text()
    assert "**SELF-TEST STOPPED: gate planted stopped with exit code 4" in md
    assert "| aa | 0% | NO REGRESSION | NO REGRESSION | yes | 2 | 8.0 |" in md
    assert "SELF-TEST STOPPED" in result.output


def test_a_self_test_stopped_before_any_look_claims_no_gate(tmp_path: Path) -> None:
    result = stopped_early(tmp_path, "prefix-eviction", "0.32.0", 0.15, 10, 20.0, "aa",
                           "stopped with exit code 4", 4)  # fmt: skip
    assert (result.gates, result.correct, result.exit_code) == ([], False, 4)
    assert headline(result) == (
        "SELF-TEST STOPPED: gate aa stopped with exit code 4: no answer, both gates must decide"
    )
