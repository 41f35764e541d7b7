"""``loadgen gate`` and the engine knobs every scenario shares: the run order, and bad engine
choices failing on the command line before any server starts."""

from __future__ import annotations

from click.testing import CliRunner

from loadgen.cli import main
from loadgen.run import gate_order
from scenarios.common import RunParams
from scenarios.kv_preemption import KVPreemption, KVPreemptionParams
from server.capacity import KVCapacity


def test_abba_order_cancels_a_linear_drift_and_abab_alternates() -> None:
    assert gate_order(2, "abab") == ["baseline", "candidate"] * 2
    order = gate_order(2, "abba")
    assert order == ["baseline", "candidate", "candidate", "baseline"]
    # Slots 0..3 under a drift linear in time: the mean slot of each side is 1.5 with A B B A,
    # while A B A B puts the candidate half a slot later (2 against 1).
    slots = {side: [i for i, s in enumerate(order) if s == side] for side in set(order)}
    assert sum(slots["baseline"]) / 2 == sum(slots["candidate"]) / 2 == 1.5
    assert gate_order(3, "abba") == [*order, "baseline", "candidate"]


def test_vllm_args_are_appended_after_the_scenarios_own_flags() -> None:
    params = KVPreemptionParams(cases="1GiB:8", vllm_args="--max-num-seqs 1")
    plan = KVPreemption().plan(params, KVCapacity(18688, 128, 146, 2**30, "metrics"))
    argv = plan.cases[0].server.command("py", "m", 1)  # type: ignore[union-attr]
    # The scenario asks for 16; the user's value comes last, and argparse keeps the last one.
    assert argv[-4:] == ["--max-num-seqs", "16", "--max-num-seqs", "1"]
    assert RunParams().server(2**30).python is None  # the project's own engine


def test_an_engine_that_is_not_installed_fails_before_any_start(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SERVING_TESTBED_ENGINES", str(tmp_path))
    runner = CliRunner()
    run = runner.invoke(main, ["run", "prefix-eviction", "--vllm", "0.1.0"])
    assert run.exit_code == 2
    assert "make engine VLLM=0.1.0" in run.output
    gate = runner.invoke(
        main,
        ["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--candidate-vllm", "0.1.0",
         "--out", str(tmp_path / "gate")],
    )  # fmt: skip
    assert gate.exit_code == 2
    assert "make engine VLLM=0.1.0" in gate.output
    assert not (tmp_path / "gate").exists()


def test_sequential_gate_flags_are_checked_before_any_start(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # An engine that is not installed: flags that pass their checks reach the engine check
    # (exit 2 naming `make engine`), so nothing ever starts.
    monkeypatch.setenv("SERVING_TESTBED_ENGINES", str(tmp_path))
    runner = CliRunner()
    base = ["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--out", str(tmp_path / "g")]
    cand = ["--candidate-vllm", "0.1.0"]
    for extra, why in (
        ([*cand, "--max-repeats", "4"], "--max-repeats needs --until-decided"),
        ([*cand, "--max-minutes", "20"], "--max-minutes needs --until-decided"),
        ([*cand, "--until-decided", "--repeats", "3", "--max-repeats", "2"], "≥ --repeats (3)"),
        ([*cand, "--until-decided", "--repeats", "1", "--max-repeats", "2"], "--repeats ≥ 2"),
        ([*cand, "--until-decided", "--max-minutes", "0"], "max-minutes"),
        ([], "--candidate-vllm is required (or --self-test F)"),
        (["--self-test", "0%"], "slowdown of 0%: it must be at least 1%"),
        (["--self-test", "2"], "slowdown of 200%: it must be at least 1%"),
        (["--self-test", "15"], "slowdown of 1500%"),
        (["--self-test", "nan"], "slowdown of nan%: it must be at least 1%"),
        # Positive, but rounding to 0 % (or under the 1 % floor): never a planted gate.
        (["--self-test", "0.0000001"], "slowdown of 1e-05%: it must be at least 1%"),
        (["--self-test", "1e-300"], "slowdown of 1e-298%: it must be at least 1%"),
        (["--self-test", "0.5%"], "slowdown of 0.5%: it must be at least 1%"),
        (["--self-test", "0.0099"], "slowdown of 0.99%: it must be at least 1%"),
        (["--self-test", "fast"], "give a percent (15%) or a fraction (0.15)"),
        (["--self-test", "15%", "--candidate-vllm", "0.2.0"], "drop --candidate-vllm 0.2.0"),
        (["--self-test", "15%", "--candidate-vllm-args", "-x"], "drop --candidate-vllm-args"),
        # Accepted: --until-decided alone (at most 10 pairs), a time bound, a self-test.
        ([*cand, "--until-decided"], "make engine VLLM=0.1.0"),
        ([*cand, "--until-decided", "--max-minutes", "30"], "make engine VLLM=0.1.0"),
        (["--self-test", "15%"], "make engine VLLM=0.1.0"),
        (["--self-test", "0.15", *cand], "make engine VLLM=0.1.0"),
        (["--self-test", "1%"], "make engine VLLM=0.1.0"),  # the floor itself is accepted
        (["--self-test", "0.01"], "make engine VLLM=0.1.0"),
    ):
        result = runner.invoke(main, [*base, *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert why in result.output, (extra, result.output)
    assert not (tmp_path / "g").exists()


def test_a_sequential_gate_without_bounds_plans_ten_pairs_within_twenty_minutes() -> None:
    from loadgen.cli.gate import DEFAULT_MAX_MINUTES, DEFAULT_MAX_REPEATS, GateParams

    gate = GateParams(baseline_vllm="0.31.0", candidate_vllm="0.32.0", until_decided=True)
    assert (gate.most_pairs, gate.time_bound_min) == (DEFAULT_MAX_REPEATS, DEFAULT_MAX_MINUTES)
    assert (gate.most_pairs, gate.time_bound_min) == (10, 20.0)
    fixed = GateParams(baseline_vllm="0.31.0", candidate_vllm="0.32.0", repeats=3)
    assert (fixed.sequential, fixed.time_bound_min) == (False, None)
    test = GateParams(baseline_vllm="0.31.0", self_test="15%")
    assert (test.sequential, test.most_pairs, test.time_bound_min) == (True, 10, 20.0)
    assert GateParams(baseline_vllm="0.31.0", self_test="0.1", max_minutes=5).time_bound_min == 5


def test_added_pairs_continue_the_gate_order() -> None:
    # --until-decided adds pair k as the last two of gate_order(k): A B B A then A B, B A, …
    added = [gate_order(k, "abba")[-2:] for k in (3, 4)]
    assert added == [["baseline", "candidate"], ["candidate", "baseline"]]


def test_a_vllm_version_is_refused_in_one_line_before_any_command(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SERVING_TESTBED_ENGINES", str(tmp_path / "engines"))
    runner = CliRunner()
    out = ["--out", str(tmp_path / "g")]
    bad = "'x;rm' is not a vLLM version (a release such as 0.31.0, PEP 440)"
    for argv, line in (
        (["gate", "prefix-eviction", "--baseline-vllm", "x;rm", "--self-test", "15%", *out],
         f"Error: --baseline-vllm: {bad}"),
        (["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--candidate-vllm", "x;rm",
          *out], f"Error: --candidate-vllm: {bad}"),
        (["gate", "prefix-eviction", "--baseline-vllm", "v0.1.0", "--candidate-vllm", "0.1.0",
          *out], "Error: --baseline-vllm: 'v0.1.0' is not a vLLM version as pip writes it: "
         "give 0.1.0"),
        (["run", "prefix-eviction", "--vllm", "x;rm", *out], f"Error: --vllm: {bad}"),
    ):  # fmt: skip
        result = runner.invoke(main, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert result.output.splitlines()[-1] == line, (argv, result.output)
        assert "make engine" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "g").exists() and not (tmp_path / "engines").exists()
