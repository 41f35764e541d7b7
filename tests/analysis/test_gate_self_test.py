"""The self-test's answer, read from each gate's last look: A/A must end NO REGRESSION, the
planted slowdown REGRESSION naming TTFT; exit 0 only when both do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.gate_self_test import summarize, write_self_test
from analysis.gate_sequential import Look

WRONG = 5


def _look(gate_dir: Path, headline: str, regressions: list[str], pairs: int = 3) -> None:
    gate_dir.mkdir(parents=True, exist_ok=True)
    look = Look(
        look=pairs - 1, looks=9, pairs=pairs, confidence=0.9944, headline=headline,
        exit_code={"no regression": 0, "regression": 1}.get(headline, 3), line=headline.upper(),
        regressions=regressions, stop=True, why="decided", at="2026-12-05T08:00:00Z",
        elapsed_s=pairs * 240.0,
        mde={"tested paired ttft_ms p50": 0.061, "tested paired tpot_ms p50": 0.032},
    )  # fmt: skip
    (gate_dir / "looks.jsonl").write_text(look.model_dump_json() + "\n")


def test_both_gates_decided_right_pass_with_their_pairs_minutes_and_mde(tmp_path: Path) -> None:
    _look(tmp_path / "aa", "no regression", [], pairs=4)
    _look(tmp_path / "planted", "regression", ["tested paired ttft_ms p50"], pairs=2)
    result = summarize(tmp_path, "prefix-eviction", "0.32.0", 0.15, 10, 20.0, WRONG)
    assert (result.correct, result.exit_code) == (True, 0)
    aa, planted = result.gates
    assert (aa.pairs, aa.minutes, aa.slowdown) == (4, 16.0, 0.0)  # 4 × 240 s
    assert (planted.pairs, planted.minutes, planted.slowdown) == (2, 8.0, 0.15)
    assert planted.mde["tested paired ttft_ms p50"] == 0.061
    path = write_self_test(result, tmp_path)
    text = path.read_text()
    assert "SELF-TEST PASS" in text
    assert "| aa | 0% | NO REGRESSION | NO REGRESSION | yes | 4" in text
    assert "| 6.1% | 3.2% |" in text
    saved = json.loads((tmp_path / "self_test.json").read_text())
    assert saved["correct"] is True and saved["gates"][1]["regressions"] == [
        "tested paired ttft_ms p50"
    ]
    assert "SELF-TEST PASS" in (tmp_path / "self_test.html").read_text()


@pytest.mark.parametrize(
    ("aa", "planted", "wrong"),
    [
        (("inconclusive", []), ("regression", ["tested paired ttft_ms p50"]), "aa"),
        (("regression", ["tested paired ttft_ms p50"]), ("regression", ["x paired ttft_ms p50"]),
         "aa"),
        # A regression that names only throughput, or only TPOT, did not catch the planted
        # first-token latency.
        (("no regression", []), ("regression", ["tested paired tpot_ms p50"]), "planted"),
        (("no regression", []), ("regression", ["tested paired output_throughput_tok_s"]),
         "planted"),
        (("no regression", []), ("inconclusive", []), "planted"),
        # A verdict that quotes TTFT in its check's name is not the planted latency either.
        (("no regression", []),
         ("regression", ["tested: verdict 'revisit/warm ttft_ms p95 ≥ 1.2×' PASS→FAIL "
                         "(6↓ 0↑ of 6 pairs)"]), "planted"),
    ],
)  # fmt: skip
def test_a_gate_decided_wrong_fails_the_self_test(
    tmp_path: Path, aa: tuple, planted: tuple, wrong: str
) -> None:
    _look(tmp_path / "aa", *aa)
    _look(tmp_path / "planted", *planted)
    result = summarize(tmp_path, "prefix-eviction", "0.32.0", 0.15, 10, 20.0, WRONG)
    assert (result.correct, result.exit_code) == (False, WRONG)
    assert [g.name for g in result.gates if not g.correct] == [wrong]
    assert f"SELF-TEST FAIL: {wrong} not decided" in write_self_test(result, tmp_path).read_text()


def test_a_gate_that_left_no_look_is_one_line(tmp_path: Path) -> None:
    _look(tmp_path / "aa", "no regression", [])
    with pytest.raises(ValueError, match=r"planted/looks\.jsonl: no look to read"):
        summarize(tmp_path, "prefix-eviction", "0.32.0", 0.15, 10, 20.0, WRONG)
