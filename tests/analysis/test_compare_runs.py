"""``loadgen compare`` on synthetic run directories (``synthetic_run``): pairing, workload
hashes, verdict flips, missing families, gate files and the exit codes.

The synthetic run's numbers (see ``synthetic_run``): warm and rewarm requests all hit the
cache (TTFT 20 ms, then 3 more tokens 10 ms apart), 6 requests per anchor phase; the tested
case's revisit probes miss. Hit rate (counters) in warm = 6 × 64 / (6 × 72) = 0.889.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.compare import CompareError, compare_paths
from analysis.compare_runs import workload_hash
from analysis.gate_decision import decide, exit_code
from analysis.gate_file import GateFileError, load_gate
from analysis.load import load_run
from analysis.report import summarize_run
from loadgen.cli import main
from loadgen.runformat import read_plan
from loadgen.runformat.manifest import write_manifest
from metrics.store import SAMPLES_FILE, SCRAPES_FILE
from tests.support.synthetic_run import TEST_CASE
from tests.support.synthetic_run import build_run as build_unsealed_run

#: Few enough values for the synthetic run's 6 requests per phase to be compared.
SMALL_GATE = "min_samples = 4\nmin_tail_samples = 1\n"


def build_run(run_dir: Path) -> None:
    """The synthetic run, sealed as a complete run is (compare refuses unsealed ones)."""
    build_unsealed_run(run_dir)
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])


def _reseal(run_dir: Path) -> None:
    """Seal ``run_dir`` again after a test changed its files as a different run would have
    written them (a changed file of a sealed run is broken: compare refuses it)."""
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])


def _rewrite_jsonl(path: Path, change: object) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in rows))  # type: ignore[operator]


def _slow_down(run: Path, factor: float) -> None:
    """Every request's token stamps stretched by ``factor`` from its send time."""

    def stretch(r: dict) -> dict:
        if r.get("chunk_ns"):
            sent = r["sent_ns"]
            r["chunk_ns"] = [sent + int((t - sent) * factor) for t in r["chunk_ns"]]
            r["end_ns"] = r["chunk_ns"][-1] + 1_000_000
        return r

    for requests in run.glob("cases/*/requests.jsonl"):
        _rewrite_jsonl(requests, stretch)


def _drop_family(run: Path, family: str) -> None:
    """As an older vLLM that lacks ``family``: no samples, and the scrape index says so."""
    for case in run.glob("cases/*"):
        samples = case / SAMPLES_FILE
        rows = [json.loads(x) for x in samples.read_text().splitlines() if x.strip()]
        samples.write_text("".join(json.dumps(r) + "\n" for r in rows if r["name"] != family))
        scrapes = case / SCRAPES_FILE
        rows = [json.loads(x) for x in scrapes.read_text().splitlines() if x.strip()]
        rows[0] |= {"aliases": {"prompt_tokens": "vllm:prompt_tokens_total"}, "missing": [family]}
        scrapes.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    build_run(tmp_path / "base")
    build_run(tmp_path / "cand")
    return tmp_path / "base", tmp_path / "cand"


def _gate_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return path


def test_the_same_run_twice_has_no_regression_and_its_undecided_key_metrics_say_why(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    comparison = compare_paths(*pair, load_gate())
    assert comparison.counts["regression"] == 0
    assert comparison.counts["improvement"] == 0
    assert comparison.counts["missing"] == 0
    assert all(v.classification == "no change" for v in comparison.verdicts)
    # A sampled KV peak from one run per side: equal here (0.5), yet no spread is known.
    peaks = [m for m in comparison.metrics if m.metric == "kv_cache_usage_peak"]
    assert {(m.change, m.classification) for m in peaks} == {(0.0, "inconclusive")}
    # 6 requests a phase: a mean or p50 needs 10 values per side (p50: max(10, 4 / 0.5)), so
    # the key TTFT/TPOT statistics are inconclusive; ⌈10 / 6⌉ = 2 runs decide whether they can
    # be computed: 1 more pair. Not a regression: exit 3, not 1.
    decision = decide(comparison)
    assert (decision.headline, exit_code(comparison)) == ("inconclusive", 3)
    assert decision.regressions == []
    too_few = [u for u in decision.undecided if u.label.endswith(("ttft_ms p50", "tpot_ms mean"))]
    assert too_few and {(u.estimate.runs_needed, u.estimate.extra_pairs)  # type: ignore[union-attr]
                        for u in too_few} == {(2, 1)}  # fmt: skip
    # With statistics allowed on 6 values, identical runs give ratio 1 everywhere; what stays
    # undecided are the phases whose 6 TTFTs are bimodal (cold: 2 probes miss at 80 ms, 4 hit
    # at 20 ms), whose resampled ratios spread far beyond ±15 %: never a regression.
    small = decide(compare_paths(*pair, load_gate(_gate_file(tmp_path, SMALL_GATE))))
    assert small.regressions == [] and small.exit_code == 3
    assert {u.label.split("/")[1].split()[0] for u in small.undecided} == {"cold", "revisit"}
    assert all(u.estimate and u.estimate.toward == "no change" for u in small.undecided)


def test_a_slower_candidate_regresses_with_the_exact_ratio(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    _slow_down(pair[1], 2.0)
    _reseal(pair[1])
    comparison = compare_paths(*pair, load_gate(_gate_file(tmp_path, SMALL_GATE)))
    # warm: every baseline TTFT is 20 ms and every candidate TTFT 40 ms, so every resample's
    # ratio is exactly 2: interval [2, 2], far beyond 1.15.
    warm = next(
        m
        for m in comparison.metrics
        if (m.case, m.phase, m.metric, m.stat) == (TEST_CASE, "warm", "ttft_ms", "mean")
    )
    assert (warm.baseline, warm.candidate) == (20.0, 40.0)
    assert (warm.change, warm.low, warm.high) == (2.0, 2.0, 2.0)
    assert warm.classification == "regression"
    assert exit_code(comparison) == 1


def _probes_hit(run: Path) -> None:
    """The candidate's revisit probes hit (no eviction): "revisit probes miss" turns FAIL."""

    def hit(r: dict) -> dict:
        if r["phase"] == "revisit" and r["index"] < 2:
            r["cached_tokens"] = 64
        return r

    _rewrite_jsonl(run / "cases" / TEST_CASE / "requests.jsonl", hit)
    _reseal(run)


def test_one_pass_that_became_fail_is_undecided_not_a_regression(
    pair: tuple[Path, Path],
) -> None:
    _probes_hit(pair[1])
    comparison = compare_paths(*pair, load_gate())
    flipped = [v for v in comparison.verdicts if v.pass_fail]
    assert [(v.check, v.baseline, v.candidate, v.classification) for v in flipped] == [
        ("revisit probes miss", "PASS", "FAIL", "inconclusive")
    ]
    # One pair, one flip: exact one-sided p = 1/2 > (1 − 0.95)/2. If every further pair
    # flipped too, 6 pairs (p = 2^-6 = 0.0156 ≤ 0.025) would decide it: 5 more.
    assert (flipped[0].blocks, flipped[0].p_regression, flipped[0].extra_pairs) == (1, 0.5, 5)
    decision = decide(comparison)
    assert decision.regressions == [] and exit_code(comparison) == 3
    line = next(u for u in decision.undecided if "revisit probes miss" in u.label)
    assert line.estimate and (line.estimate.extra_pairs, line.estimate.toward) == (
        5,
        "regression",
    )


@pytest.mark.parametrize(("pairs", "klass"), [(5, "inconclusive"), (6, "regression")])
def test_a_check_that_fails_in_every_candidate_pair_regresses_from_6_pairs(
    tmp_path: Path, pairs: int, klass: str
) -> None:
    # p = 2^-k: 2^-5 = 0.03125 > 0.025 ≥ 2^-6 = 0.0156 at the default 95 %.
    for k in range(1, pairs + 1):
        build_run(tmp_path / "base" / f"run-{k}")
        build_run(tmp_path / "cand" / f"run-{k}")
        _probes_hit(tmp_path / "cand" / f"run-{k}")
    comparison = compare_paths(tmp_path / "base", tmp_path / "cand", load_gate())
    probes = next(v for v in comparison.verdicts if v.check == "revisit probes miss")
    assert (probes.pass_fail, probes.fail_pass, probes.blocks) == (pairs, 0, pairs)
    assert probes.p_regression == 0.5**pairs and probes.classification == klass
    named = [r for r in decide(comparison).regressions if "revisit probes miss" in r]
    assert len(named) == (klass == "regression")


def test_a_family_missing_in_the_candidate_is_missing_not_zero(pair: tuple[Path, Path]) -> None:
    _drop_family(pair[1], "prefix_cache_hits")
    _reseal(pair[1])
    comparison = compare_paths(*pair, load_gate())
    rates = [m for m in comparison.metrics if m.metric == "prefix_cache_hit_rate"]
    assert rates and all(m.classification == "missing" for m in rates)
    assert "prefix_cache_hits" in rates[0].note and "candidate run cand" in rates[0].note
    assert rates[0].change is None  # no difference was made up from a 0
    # The checks decided from that family are undecided in the candidate, and say why.
    undecided = [v for v in comparison.verdicts if v.candidate == "UNDECIDED"]
    assert {v.check for v in undecided} >= {"revisit hit rate below warm"}
    assert exit_code(comparison) == 3


def test_a_missing_family_that_is_not_gated_does_not_fail_the_gate(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    _drop_family(pair[1], "num_preemptions")
    _reseal(pair[1])
    gate = load_gate(_gate_file(tmp_path, "[metrics.num_preemptions]\ngate = false\n"))
    comparison = compare_paths(*pair, gate)
    assert {m.classification for m in comparison.metrics if m.metric == "num_preemptions"} == {
        "missing"
    }
    # num_preemptions is no longer key (gate = false): its missing family does not count.
    assert not [u for u in decide(comparison).undecided if "num_preemptions" in u.label]
    assert exit_code(comparison) == 3  # the 6-request statistics are still undecided


def test_runs_with_different_workloads_are_refused_unless_allowed(tmp_path: Path) -> None:
    build_run(tmp_path / "base")
    build_run(tmp_path / "cand")
    plan = json.loads((tmp_path / "cand" / "plan.json").read_text())
    plan["seed"] = 1  # other prompt tokens: another workload
    (tmp_path / "cand" / "plan.json").write_text(json.dumps(plan))
    _reseal(tmp_path / "cand")
    assert workload_hash(read_plan(tmp_path / "base")) != workload_hash(
        read_plan(tmp_path / "cand")
    )
    with pytest.raises(CompareError, match="workloads differ"):
        compare_paths(tmp_path / "base", tmp_path / "cand", load_gate())
    allowed = compare_paths(
        tmp_path / "base", tmp_path / "cand", load_gate(), allow_workload_mismatch=True
    )
    assert not allowed.workload_match and "compared anyway" in allowed.notes[0]


def test_the_workload_hash_ignores_the_server(tmp_path: Path) -> None:
    build_run(tmp_path / "base")
    plan = json.loads((tmp_path / "base" / "plan.json").read_text())
    before = workload_hash(read_plan(tmp_path / "base"))
    plan["cases"][0]["server"]["python"] = "/elsewhere/bin/python"
    plan["cases"][0]["server"]["extra_args"] = ["--max-num-seqs", "1"]
    (tmp_path / "base" / "plan.json").write_text(json.dumps(plan))
    _reseal(tmp_path / "base")
    assert workload_hash(read_plan(tmp_path / "base")) == before


def test_repeats_in_a_directory_are_pooled(tmp_path: Path) -> None:
    for side in ("base", "cand"):
        for k in (1, 2):
            build_run(tmp_path / side / f"run-{k}")
    comparison = compare_paths(tmp_path / "base", tmp_path / "cand", load_gate())
    warm = next(
        m
        for m in comparison.metrics
        if (m.case, m.phase, m.metric, m.stat) == (TEST_CASE, "warm", "ttft_ms", "mean")
    )
    assert (warm.n_baseline, warm.n_candidate) == (12, 12)  # 2 runs × 6 requests
    rate = next(
        m
        for m in comparison.metrics
        if (m.case, m.phase, m.metric) == (TEST_CASE, "warm", "prefix_cache_hit_rate")
    )
    peak = next(
        m
        for m in comparison.metrics
        if (m.case, m.phase, m.metric) == (TEST_CASE, "warm", "kv_cache_usage_peak")
    )
    # Warm's window is its start + 801 ms (last request end) + 0.5 s settle: scrapes at 0, 250,
    # …, 1,250 ms are 6 points, too few for a peak to be compared.
    assert (peak.change, peak.classification) == (0.0, "inconclusive")
    assert peak.note and "as few as 6 scrapes" in peak.note
    # Both runs of each side give 384 / 432 = 0.889: zero spread, a zero difference.
    assert rate.per_run_baseline == pytest.approx([384 / 432] * 2)
    assert (rate.low, rate.high, rate.classification) == (0.0, 0.0, "no change")


def test_a_well_sampled_peak_with_repeats_is_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the warm window's 6 scrapes
    monkeypatch.setattr("analysis.compare_figures.MIN_PEAK_SAMPLES", 6)
    for side in ("base", "cand"):
        for k in (1, 2):
            build_run(tmp_path / side / f"run-{k}")
    comparison = compare_paths(tmp_path / "base", tmp_path / "cand", load_gate())
    peak = next(
        m
        for m in comparison.metrics
        if (m.case, m.phase, m.metric) == (TEST_CASE, "warm", "kv_cache_usage_peak")
    )
    assert peak.per_run_baseline == [0.5, 0.5]
    assert (peak.low, peak.high, peak.classification) == (0.0, 0.0, "no change")


def test_cli_exit_codes_and_files(pair: tuple[Path, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    # Key metrics that identical runs decide (TPOT is 10 ms in every request: ratio exactly 1).
    decided = tmp_path / "decided.toml"
    decided.write_text(SMALL_GATE + '[key_metrics]\n"prefix-eviction" = ["tpot_ms.mean"]\n')
    same = runner.invoke(
        main, ["compare", *map(str, pair), "--gate", str(decided), "--out", str(tmp_path / "o1")]
    )
    assert same.exit_code == 0, same.output
    assert "NO REGRESSION" in same.output
    assert (tmp_path / "o1" / "compare.md").exists()
    data = json.loads((tmp_path / "o1" / "compare.json").read_text())
    assert data["exit_code"] == 0 and data["baseline"]["vllm_versions"] == ["0.32.0"]
    assert (tmp_path / "o1" / "plots" / f"compare_{TEST_CASE}.png").exists()
    # --strict: every gated metric decides, and the 6-request phases leave statistics
    # inconclusive; so do the default key metrics (a mean needs 10 values): exit 3, naming
    # them and the one more pair that gives them enough values.
    strict = runner.invoke(
        main, ["compare", *map(str, pair), "--gate", str(decided), "--strict",
               "--out", str(tmp_path / "o2")],
    )  # fmt: skip
    assert strict.exit_code == 3, strict.output
    default = runner.invoke(main, ["compare", *map(str, pair), "--out", str(tmp_path / "o5")])
    assert default.exit_code == 3, default.output
    assert "INCONCLUSIVE" in default.output and "~1 more pair" in default.output
    assert "~1 more pair" in (tmp_path / "o5" / "compare.md").read_text()
    _slow_down(pair[1], 2.0)
    _reseal(pair[1])
    gate = _gate_file(tmp_path, SMALL_GATE)
    worse = runner.invoke(
        main, ["compare", *map(str, pair), "--gate", str(gate), "--out", str(tmp_path / "o3")]
    )
    assert worse.exit_code == 1, worse.output
    assert "REGRESSION" in (tmp_path / "o3" / "compare.md").read_text()
    not_runs = runner.invoke(
        main, ["compare", str(tmp_path / "o1"), str(pair[1]), "--out", str(tmp_path / "o4")]
    )
    assert not_runs.exit_code == 2, not_runs.output


def test_gate_file_overrides_merge_and_unknown_metrics_are_errors(tmp_path: Path) -> None:
    gate = load_gate(_gate_file(tmp_path, 'seed = 3\n[metrics."ttft_ms.p99"]\ntolerance = 0.5\n'))
    assert gate.seed == 3
    assert gate.rule("ttft_ms", "p99").tolerance == 0.5  # type: ignore[union-attr]
    assert gate.rule("ttft_ms", "p50").tolerance == load_gate().rule("ttft_ms").tolerance  # type: ignore[union-attr]
    with pytest.raises(GateFileError, match="unknown metric 'ttft'"):
        load_gate(_gate_file(tmp_path, "[metrics.ttft]\ntolerance = 0.1\n"))
    with pytest.raises(GateFileError, match="tolerance"):
        load_gate(_gate_file(tmp_path, "[metrics.ttft_ms]\ntolerance = -1\n"))
    with pytest.raises(GateFileError, match="resamples"):
        load_gate(_gate_file(tmp_path, "resamples = 10\n"))


def test_a_check_that_needs_a_missing_family_is_undecided_and_names_it(tmp_path: Path) -> None:
    build_run(tmp_path / "run")
    _drop_family(tmp_path / "run", "prefix_cache_hits")
    verdicts = summarize_run(load_run(tmp_path / "run")).summary.verdicts
    below = next(
        v for v in verdicts if v.case == TEST_CASE and v.check == "revisit hit rate below warm"
    )
    assert below.passed is None
    assert below.detail.startswith(
        "cannot decide on vLLM 0.32.0: metric family 'prefix_cache_hits' was on no scrape"
    )
    # Checks that do not read the family are still decided.
    probes = next(v for v in verdicts if v.case == TEST_CASE and v.check == "revisit probes miss")
    assert probes.passed is True


def test_a_phase_where_every_request_failed_has_no_cached_token_rate_not_a_drop_to_0(
    pair: tuple[Path, Path],
) -> None:
    # Every candidate warm request failed (429 before any token): it reported no cached
    # tokens, so warm's cached-token rate is undefined there (baseline: 6 × 64 / (6 × 72) =
    # 0.889), inconclusive, never the regression 0.889 → 0 a count of failures as misses gave.
    def fail(r: dict) -> dict:
        if r["phase"] == "warm":
            r |= {"status": "error", "error": "HTTP 429", "chunk_ns": [], "chunk_tokens": [],
                  "cached_tokens": None, "http_status": 429}  # fmt: skip
        return r

    _rewrite_jsonl(pair[1] / "cases" / TEST_CASE / "requests.jsonl", fail)
    case_json = pair[1] / "cases" / TEST_CASE / "case.json"  # its count agrees with the records
    case_json.write_text(json.dumps(json.loads(case_json.read_text()) | {"failed_requests": 6}))
    _reseal(pair[1])
    comparison = compare_paths(*pair, load_gate())
    rate = next(
        m
        for m in comparison.metrics
        if (m.case, m.phase, m.metric) == (TEST_CASE, "warm", "cached_token_rate")
    )
    assert rate.per_run_baseline == pytest.approx([384 / 432])
    assert rate.per_run_candidate == [None]
    assert (rate.classification, rate.note) == ("inconclusive", "undefined in a run (no data)")


def test_an_incomplete_run_is_refused_unless_allowed_and_then_every_figure_is_marked(
    tmp_path: Path,
) -> None:
    build_run(tmp_path / "base")
    build_unsealed_run(tmp_path / "cand")  # killed: never sealed, run.json still "running"
    run_json = tmp_path / "cand" / "run.json"
    run_json.write_text(json.dumps(json.loads(run_json.read_text()) | {"status": "running"}))
    why = f"candidate run {tmp_path / 'cand'} (run status running; no manifest.json"
    with pytest.raises(CompareError, match="refusing to compare runs that did not complete"):
        compare_paths(tmp_path / "base", tmp_path / "cand", load_gate())
    refused = CliRunner().invoke(
        main, ["compare", str(tmp_path / "base"), str(tmp_path / "cand"), "--out",
               str(tmp_path / "o")],
    )  # fmt: skip
    assert refused.exit_code == 2 and "--allow-incomplete" in refused.output
    allowed = compare_paths(tmp_path / "base", tmp_path / "cand", load_gate(),
                            allow_incomplete=True)  # fmt: skip
    assert all(m.incomplete and m.note.startswith("from an incomplete run: " + why)
               for m in allowed.metrics)  # fmt: skip
    assert all(v.incomplete for v in allowed.verdicts)
    assert any("compared anyway (--allow-incomplete)" in n for n in allowed.notes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[metrics.num_preemptions]\nstats = ["p95"]\n',
         "[metrics.num_preemptions] stats: num_preemptions is a per-run figure"),
        ('[metrics."num_preemptions.p95"]\ntolerance = 1\n',
         'num_preemptions is a per-run figure (one value per run) with no statistics'),
        ('[metrics."ttft_ms.p42"]\ntolerance = 0.2\n', "unknown statistic 'p42'"),
        ("[metrics.ttft_ms]\ntolerance = inf\n",
         "metrics.ttft_ms.tolerance: Input should be a finite number"),
        ("[metrics.failed_requests]\ntolerance = nan\n", "Input should be a finite number"),
    ],
)  # fmt: skip
def test_gate_settings_that_would_be_ignored_or_never_classify_are_refused(
    tmp_path: Path, pair: tuple[Path, Path], text: str, message: str
) -> None:
    gate = _gate_file(tmp_path, text)
    with pytest.raises(GateFileError) as info:
        load_gate(gate)
    assert message in str(info.value)
    cli = CliRunner().invoke(
        main, ["compare", *map(str, pair), "--gate", str(gate), "--out", str(tmp_path / "o")]
    )
    assert cli.exit_code == 2 and message in cli.output
