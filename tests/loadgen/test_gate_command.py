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


def test_until_decided_needs_max_repeats_at_least_repeats_before_any_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    base = ["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--candidate-vllm", "0.1.0",
            "--out", str(tmp_path / "gate")]  # fmt: skip
    for extra, why in (
        (["--max-repeats", "4"], "--max-repeats needs --until-decided"),
        (["--until-decided"], "--until-decided needs --max-repeats"),
        (["--until-decided", "--repeats", "3", "--max-repeats", "2"], "≥ --repeats (3)"),
        (["--until-decided", "--repeats", "1", "--max-repeats", "2"], "--repeats ≥ 2"),
    ):
        result = runner.invoke(main, [*base, *extra])
        assert result.exit_code == 2, result.output
        assert why in result.output
    assert not (tmp_path / "gate").exists()


def test_added_pairs_continue_the_gate_order() -> None:
    # --until-decided adds pair k as the last two of gate_order(k): A B B A then A B, B A, …
    added = [gate_order(k, "abba")[-2:] for k in (3, 4)]
    assert added == [["baseline", "candidate"], ["candidate", "baseline"]]
