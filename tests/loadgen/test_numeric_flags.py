"""Every numeric flag of every command is checked before anything starts: finite, in its
range, no collisions, and a schedule no longer than the limit. A refused flag exits 2 with one
error line, creates no run directory and starts no server; nothing here may start one (the
start points are replaced by failures)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import server.manager
from loadgen.cli import main
from scenarios.registry import SCENARIOS
from server.cli_options import FiniteFloat


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run, a gate's run, a server or the gateway starting fails the test at once."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run or a server was started")

    async def refuse_async(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a server was started")

    for module in ("loadgen.cli.run", "loadgen.cli.gate"):
        monkeypatch.setattr(sys.modules[module], "run_and_report", refuse)
    monkeypatch.setattr(server.manager, "start_server", refuse_async)
    monkeypatch.setattr(sys.modules["gateway.cli"], "run_event_loop", refuse)


def invoke(*args: str) -> tuple[int, str]:
    """``loadgen ARGS``: (exit code, output with line breaks folded into spaces)."""
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, " ".join(result.output.split())


def _commands(
    group: click.Group, prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


#: Every command of ``loadgen``, one subcommand per scenario under run and gate included.
COMMANDS = dict(_commands(main, ()))


def _numeric(command: click.Command, kind: type) -> list[str]:
    """The long flags of ``command``'s options of click type ``kind`` (not hidden)."""
    return [
        o.opts[0]
        for o in command.params
        if isinstance(o, click.Option) and not o.hidden and isinstance(o.type, kind)
    ]


def test_every_command_is_seen() -> None:
    names = {" ".join(path) for path in COMMANDS}
    for scenario in SCENARIOS:
        assert {f"run {scenario}", f"gate {scenario}"} <= names
    assert {"server start", "server stop", "gateway", "trace stats", "export", "compare"} <= names


def test_no_float_option_of_any_command_accepts_nan() -> None:
    # click's FLOAT and FloatRange take "nan" (nan compares false with every bound); every
    # float option is a FiniteFloat instead.
    loose = {
        " ".join(path): _numeric(command, click.types.FloatParamType)
        for path, command in COMMANDS.items()
    }
    assert {k: v for k, v in loose.items() if v} == {}


def _unbounded(option: click.Option) -> bool:
    """A number option with no upper bound: neither its click type (``IntRange``,
    ``FiniteFloat``) nor its model field (whose bound its help shows as ``x ≤ N``/``x < N``,
    ``server.cli_options``) has one."""
    t = option.type
    if isinstance(t, click.IntRange | click.FloatRange) and t.max is not None:
        return False
    if isinstance(t, FiniteFloat) and t.hi is not None:
        return False
    if isinstance(t, click.types.IntParamType | click.types.FloatParamType | FiniteFloat):
        return not re.search(r"x [≤<] \d", " ".join((option.help or "").split()))
    return False


def test_every_number_flag_of_every_command_has_an_upper_bound_shown_in_its_help() -> None:
    # A finite but absurd value (--temperature 1e308, --cache-tokens 10^21, --seed 10^23)
    # was taken as given: every number flag has a documented ceiling now.
    loose = {
        " ".join(path): [o.opts[0] for o in command.params
                         if isinstance(o, click.Option) and not o.hidden and _unbounded(o)]
        for path, command in COMMANDS.items()
    }  # fmt: skip
    assert {k: v for k, v in loose.items() if v} == {}


FLOAT_FLAGS = [
    (path, flag) for path, command in COMMANDS.items() for flag in _numeric(command, FiniteFloat)
]
INT_FLAGS = [
    (path, flag)
    for path, command in COMMANDS.items()
    for flag in _numeric(command, click.types.IntParamType)
]


def _required(path: tuple[str, ...], tmp_path: Path) -> list[str]:
    """What ``path`` needs besides the flag under test (the flag's own error comes first)."""
    if path[0] == "gate":
        return [
            "--baseline-vllm",
            "0.1.0",
            "--candidate-vllm",
            "0.2.0",
            "--out",
            str(tmp_path / "out"),
        ]
    if path[0] == "run":
        return ["--out", str(tmp_path / "out")]
    if path in (("export",), ("compare",)):
        return [str(tmp_path)] * (2 if path == ("compare",) else 1)
    if path == ("trace", "stats"):
        return [str(tmp_path / "t.jsonl")]
    return []


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
@pytest.mark.parametrize(
    ("path", "flag"), FLOAT_FLAGS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else x
)
def test_every_float_flag_refuses_a_non_finite_value(
    tmp_path: Path, path: tuple[str, ...], flag: str, value: str
) -> None:
    code, out = invoke(*path, *_required(path, tmp_path), f"{flag}={value}")
    assert code == 2, out
    assert f"Invalid value for '{flag}': '{value}' is not a finite number" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("path", "flag"), INT_FLAGS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else x
)
def test_every_integer_flag_refuses_a_fraction(
    tmp_path: Path, path: tuple[str, ...], flag: str
) -> None:
    code, out = invoke(*path, *_required(path, tmp_path), f"{flag}=1.5")
    assert code == 2, out
    assert f"Invalid value for '{flag}': '1.5' is not a valid integer" in out
    assert not (tmp_path / "out").exists()


def trace_file(tmp_path: Path, name: str, *timestamps_ms: float) -> str:
    """A Mooncake trace ``name`` with one short request at each timestamp (ms)."""
    path = tmp_path / name
    lines = [{"timestamp": t, "input_length": 512, "output_length": 4, "hash_ids": [i]}
             for i, t in enumerate(timestamps_ms)]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _gate_file(tmp_path: Path, line: str) -> str:
    path = tmp_path / f"gate-{abs(hash(line))}.toml"
    path.write_text(line + "\n")
    return str(path)


#: (command line, the error, derived by hand). Schedules: each phase's schedule is the due
#: time of its last request plus its settle wait (1 s by default).
REFUSED: list[tuple[list[str], str]] = [
    # --- the one parser of rates, durations, sizes, SLOs and their lists -----------------
    (["run", "bench", "--rate", "nan"], "--rate: rate 'nan' is not a finite number"),
    (["run", "bench", "--rate", "nan", "--url", "http://127.0.0.1:9"],
     "--rate: rate 'nan' is not a finite number"),  # attached: still before the run directory
    (["run", "bench", "--rate", "-2"], "--rate: rate -2 must be > 0 req/s"),
    (["run", "bench", "--rate", "0"], "--rate: rate 0 must be > 0 req/s"),
    (["run", "bench", "--rate", "2,2.0"], "--rate: rate 2 is given twice"),
    (["run", "slo-goodput", "--rates", "inf"], "--rates: rate 'inf' is not a finite number"),
    (["run", "slo-goodput", "--rate-fractions", "0.5,20"],
     "--rate-fractions: rate fraction 20 must be ≤ 10 (of the saturation throughput)"),
    (["run", "slo-goodput", "--duration", "nan"],
     "--duration: 'nan' is not a duration; e.g. 40s, 500ms, 2m"),
    (["run", "slo-goodput", "--slo", "ttft=0s"],
     "--slo: SLO ttft: '0s' is zero: a limit must be > 0"),
    (["run", "bench", "--slo", "ttft=100ms,tpot=0ms"],
     "--slo: SLO tpot: '0ms' is zero: a limit must be > 0"),
    (["run", "bench", "--slo", "e2el=-5s"],
     "--slo: SLO e2el: '-5s' is negative: a limit must be > 0"),
    (["run", "bench", "--slo", "ttft=fast"],
     "--slo: SLO ttft: 'fast' is not a limit; e.g. 40s, 500ms, 2m"),
    (["run", "bench", "--dataset", "/dev/zero"],
     "--dataset: /dev/zero: is a character device, not a regular file"),
    (["run", "bench", "--dataset", "RUN"], "is a directory, not a file"),
    # IDs 0-4095 exist in the embedded model; 4096 would fail its request at the server.
    (["run", "bench", "--dataset", "D_VOCAB"],
     "--dataset row 0 (from 0): token ID 4096 is beyond the embedded model's vocabulary of "
     "4,096 tokens (IDs 0-4095); case 1GiB would fail that request"),
    (["run", "bench", "--dataset", "D_HUGE"],
     "line 1: prompt_token_ids[1] = 100000000000000000000 is no token ID (0 to 2147483647)"),
    (["run", "bench", "--concurrency", "1,1.0"], "--concurrency: concurrency '1.0' is not an "
     "integer"),
    (["run", "kv-preemption", "--cache", "1GiB,1024MiB"],
     "--cache: cache size 1024MiB is given twice (1073741824 bytes)"),
    (["run", "trace-replay", "--trace", "T", "--speedup", "nan"],
     "--speedup: speedup 'nan' is not a finite number"),
    (["run", "trace-replay", "--trace", "T", "--speedup", "2000"],
     "--speedup: speedup 2000 must be ≤ 1000"),
    (["run", "trace-replay", "--trace", "T", "--window", "0-" + "9" * 400],
     "is not a trace time"),  # 400 nines overflow a float to inf
    # --- schedules above 24 h (no --allow-long-schedule) ---------------------------------
    # 100 requests at 0.001 req/s, constant gaps: 99 × 1,000 s + 1 s settle = 99,001 s.
    (["run", "bench", "--rate", "0.001", "--requests", "100", "--arrival-pattern", "constant"],
     "the schedule of this run would take 27.5 h (phase r0.001 of case 1GiB); the limit is "
     "24 h; pass --allow-long-schedule to run it anyway"),
    # 64 requests at 1e-9 req/s: 63 × 1e9 s = 6.3e10 s = 1,998 years of 365 days.
    (["run", "bench", "--rate", "1e-9", "--arrival-pattern", "constant"],
     "the schedule of this run would take 1,998 years (phase r1e-09 of case 1GiB)"),
    # Attached: no server to size, the schedule is the same.
    (["run", "bench", "--rate", "1e-9", "--arrival-pattern", "constant", "--url",
      "http://127.0.0.1:9"], "would take 1,998 years (phase r1e-09 of case attached)"),
    # Requests at 0 and 1,000 ms of trace time at speedup 1e-9: 1 s ÷ 1e-9 = 1e9 s = 31.7 y.
    (["run", "trace-replay", "--trace", "T2", "--window", "all", "--speedup", "1e-9"],
     "the schedule of this run would take 31.7 years (phase speedup-1e-09x of case 1GiB)"),
    # 1e300 s = 3.17e292 years: refused, never an OverflowError.
    (["run", "trace-replay", "--trace", "T2", "--window", "all", "--speedup", "1e-300"],
     "would take 3.17e+292 years (phase speedup-1e-300x of case 1GiB)"),
    # A legal trace spanning 10^12 ms at speedup 1000: 1e9 s ÷ 1000 = 1e6 s = 11.6 days.
    (["run", "trace-replay", "--trace", "T12", "--window", "all", "--speedup", "1000"],
     "the schedule of this run would take 11.6 days (phase speedup-1000x of case 1GiB); the "
     "limit is 24 h; pass --allow-long-schedule to run it anyway"),
    (["run", "trace-replay", "--trace", "T2", "--window", "all", "--speedup", "1e-300",
      "--allow-long-schedule"], "even with --allow-long-schedule the limit is 365 days"),
    # --- ranges of the run knobs ------------------------------------------------------------
    (["run", "bench", "--seed", "-1"],
     "--seed: Input should be greater than or equal to 0 (got -1)"),
    (["run", "bench", "--max-model-len", "2000000"],
     "--max-model-len: Input should be less than or equal to 1048576 (got 2000000)"),
    (["run", "bench", "--metrics-max-bytes", "99999999999999999999"],
     "--metrics-max-bytes: Input should be less than or equal to 1073741824"),
    (["run", "bench", "--token-id-high", "5000"],
     "--token-id-high 5000: the embedded model's vocabulary has 4,096 tokens"),
    (["run", "bench", "--burstiness", "0.001"],
     "--burstiness: Input should be greater than or equal to 0.01 (got 0.001)"),
    (["run", "bench", "--dataset-seed", "-1"],
     "--dataset-seed: Input should be greater than or equal to 0 (got -1)"),
    (["run", "bench", "--vllm", ""], "--vllm: String should have at least 1 character"),
    (["run", "slo-goodput", "--slo-factor", "1e4"],
     "--slo-factor: Input should be less than or equal to 1000 (got 10000.0)"),
    # 8 requests × 0.1 = 0.8: not one request disconnects.
    (["run", "disconnect-abort", "--disconnect-fraction", "0.1"],
     "--disconnect-fraction 0.1 × --requests 8 = 0.8: no request disconnects, nothing to "
     "measure"),
    (["run", "spec-decode", "--prompt-lookup-max", "99999999999999999999"],
     "--prompt-lookup-max: Input should be less than or equal to 1048576 (got "
     "99999999999999999999)"),
    (["run", "spec-decode", "--prompt-lookup-max", "4096"],
     "--prompt-lookup-max (4096) is longer than the context (--max-model-len 2048): no match "
     "can be that long"),
    (["run", "prefix-eviction", "--hit-rate-tolerance", "2"],
     "--hit-rate-tolerance: Input should be less than or equal to 1 (got 2.0)"),
    # 1000 TiB = 1,024,000 GiB: vLLM's CPU build would fail to allocate it after its start.
    (["run", "bench", "--cache", "1000TiB"],
     "case 1000TiB: a KV cache of 1.02e+06 GiB is more than this machine's"),
    (["server", "start", "--cache", "1000TiB"],
     "a KV cache of 1.02e+06 GiB is more than this machine's"),
    (["run", "bench", "--workers", "99999999999999999999"],
     "Invalid value for --workers: 99999999999999999999 workers: at most 256"),
    (["run", "bench", "--workers", "nan"],
     "Invalid value for --workers: 'nan' is not a worker count ≥ 1 or 'auto'"),
    # --- gate -------------------------------------------------------------------------------
    (["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--candidate-vllm", "0.2.0",
      "--until-decided", "--max-repeats", "99999999999999999999"],
     "--max-repeats: Input should be less than or equal to 100 (got 99999999999999999999)"),
    # 1 − (1 − 0.9999999999999999)/99 looks is 1.0 in a double: no interval could be built.
    (["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--candidate-vllm", "0.2.0",
      "--until-decided", "--max-repeats", "100", "--gate", "G_CONF"],
     "the gate file's confidence 0.9999999999999999 split over 99 looks rounds to 1 for each "
     "look: lower --max-repeats or the confidence"),
    (["gate", "prefix-eviction", "--baseline-vllm", "", "--candidate-vllm", "0.32.0"],
     "--baseline-vllm: String should have at least 1 character (got '')"),
    (["gate", "prefix-eviction", "--baseline-vllm", "0.1.0", "--candidate-vllm", "0.2.0",
      "--repeats", "0"], "--repeats: Input should be greater than or equal to 1 (got 0)"),
    # --- compare: its numbers come from the gate file ---------------------------------------
    (["compare", "RUN", "RUN", "--gate", "G_NAN"], "confidence: Input should be a finite number"),
    (["compare", "RUN", "RUN", "--gate", "G_RES"],
     "resamples: Input should be less than or equal to 100000"),
    (["compare", "RUN", "RUN", "--gate", "G_SEED"],
     "seed: Input should be greater than or equal to 0"),
    # --- server, trace stats, export ----------------------------------------------------------
    (["server", "start", "--max-model-len", "0"],
     "--max-model-len: Input should be greater than 0 (got 0)"),
    (["server", "stop", "--port", "70000"], "70000 is not in the range 1<=x<=65535"),
    (["trace", "stats", "T2", "--block-tokens", "0"], "0 is not in the range 1<=x<=1048576"),
    # Finite but absurd: each number flag has a ceiling (the constants of scenarios.common).
    (["run", "bench", "--temperature", "1e308"],
     "--temperature: Input should be less than or equal to 10 (got 1e+308)"),
    (["run", "bench", "--seed", str(2**64)],
     f"--seed: Input should be less than or equal to {2**64 - 1} (got {2**64})"),
    (["run", "bench", "--input-len", str(2**20 + 1)],
     "--input-len: Input should be less than or equal to 1048576 (got 1048577)"),
    (["run", "bench", "--cache", "1025TiB"],
     "invalid size '1025TiB': larger than the limit of 1PiB (2^50 bytes)"),
    (["trace", "stats", "T2", "--cache-tokens", "999999999999999999999"],
     "--cache-tokens: cache size 999999999999999999999 must be ≤ 1099511627776 (2^40 tokens, "
     "a PiB of KV at 1 KiB a token)"),
    (["trace", "stats", "T2", "--seed", "-1"], "-1 is not in the range 0<=x<="),
    (["trace", "stats", "T2", "--peak-window", "1e12"], "1e12 must be ≤ 3.1536e+07"),
    (["gateway", "--upstream", "http://127.0.0.1:99999"],
     "--upstream: upstream 'http://127.0.0.1:99999': Port out of range 0-65535 (a TCP port is "
     "1-65535)"),
    (["trace", "stats", "T2", "--replicas", "2", "--cache", "1GiB", "--worker-urls",
      "http://127.0.0.1:8000,http://127.0.0.1:99999"],
     "--worker-urls: 'http://127.0.0.1:99999' is not a valid URL (Port out of range 0-65535)"),
    (["trace", "stats", "T2", "--replicas", "2", "--cache", "1GiB", "--worker-urls",
      "http://127.0.0.1:8000,http://127.0.0.1:8000/"],
     "--worker-urls: http://127.0.0.1:8000 is given twice; each replica has its own"),
    (["gateway", "--upstream", "http://127.0.0.1:9", "--total-timeout", "1e12"],
     "--total-timeout: Input should be less than or equal to 86400 (got 1000000000000.0)"),
    (["trace", "stats", "T2", "--cache-tokens", "1024", "--replicas", "65"],
     "65 is not in the range 1<=x<=64"),
    (["export", "RUN", "--percentiles", "nan"], "percentile 'nan' is not a finite number"),
    (["export", "RUN", "--percentiles", "100"], "percentile 100 must be < 100"),
    (["export", "RUN", "--percentiles", "99,99.0"], "percentile 99 is given twice"),
]  # fmt: skip


def _dataset(tmp_path: Path, name: str, token_ids: list[int]) -> str:
    """A one-row JSONL dataset of ``token_ids``."""
    path = tmp_path / name
    path.write_text(json.dumps({"prompt_token_ids": token_ids}) + "\n")
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"), REFUSED, ids=lambda x: " ".join(x) if isinstance(x, list) else None
)
def test_a_bad_number_is_refused_in_one_line_before_anything_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    files = {
        "T": trace_file(tmp_path, "t.jsonl", 0, 1000),
        "T2": trace_file(tmp_path, "t2.jsonl", 0, 1000),
        "T12": trace_file(tmp_path, "t12.jsonl", 0, 1e12),
        "RUN": str(tmp_path),
        "G_NAN": _gate_file(tmp_path, "confidence = nan"),
        "G_RES": _gate_file(tmp_path, "resamples = 99999999999999"),
        "G_SEED": _gate_file(tmp_path, "seed = -1"),
        "G_CONF": _gate_file(tmp_path, "confidence = 0.9999999999999999"),
        "D_VOCAB": _dataset(tmp_path, "vocab.jsonl", [1, 4095, 4096]),
        "D_HUGE": _dataset(tmp_path, "huge.jsonl", [1, 10**20]),
    }
    (tmp_path / "plan.json").write_text("{}")  # export's "is it a run directory" check
    args = [files.get(a, a) for a in args]
    out_dir = tmp_path / "out"
    extra = ["--out", str(out_dir)] if args[0] in ("run", "gate", "compare") else []
    code, out = invoke(*args, *extra)
    assert code == 2, out
    assert message in out, out
    errors = [line for line in CliRunner().invoke(main, [*args, *extra]).output.splitlines()
              if line.startswith("Error")]  # fmt: skip
    assert len(errors) == 1
    assert not out_dir.exists()


# --- Phase names never collide ----------------------------------------------------------------


def test_close_numbers_name_distinct_phases_in_every_scenario_that_names_phases_by_them(
    tmp_path: Path,
) -> None:
    from scenarios.bench import Bench, BenchParams
    from scenarios.slo_goodput import SLOGoodput, SLOGoodputParams
    from scenarios.trace_replay import TraceReplay, TraceReplayParams
    from server.capacity import KVCapacity

    capacity = KVCapacity(18_688, 128, 146, 2**30, "metrics")
    bench = Bench().plan(BenchParams(rate="0.1000001,0.1", requests=1), capacity)
    assert [p.name for p in bench.phases] == ["r0.1000001", "r0.1"]
    trace = trace_file(tmp_path, "t.jsonl", 0, 1000)
    replay = TraceReplay().plan(
        TraceReplayParams(trace=trace, window="all", speedup="0.1,0.1000001"), capacity
    )
    assert [p.name for p in replay.phases] == ["speedup-0.1x", "speedup-0.1000001x"]
    # The sweep's fractions keep their two decimals where those are exact (0.50x, as before).
    goodput = SLOGoodput().plan(SLOGoodputParams(rate_fractions="0.25,0.251,0.5"), capacity)
    assert [p.name for p in goodput.phases][-3:] == ["rate-0.25x", "rate-0.251x", "rate-0.50x"]


def test_a_plan_with_two_phases_of_one_name_is_refused() -> None:
    from scenarios.arrivals import AllAtOnce
    from scenarios.plan import CaseSpec, PhaseSpec, Plan
    from scenarios.workloads import UniquePrompts

    phase = PhaseSpec(name="p", workload=UniquePrompts(prompt_tokens=1, requests=1,
                      output_tokens=1), arrival=AllAtOnce())  # fmt: skip
    with pytest.raises(ValueError, match=r"case c: phase name\(s\) \['p'\] used more than once"):
        Plan(scenario="s", description="", params={}, cases=(CaseSpec(name="c", url="http://h"),),
             phases=(phase, phase))  # fmt: skip


async def test_the_report_of_two_close_rates_has_both_phases(tmp_path: Path) -> None:
    """--rate 0.1000001,0.1 once made two phases named r0.1, and the report then failed
    ("recorded more than once") after every request was sent; each is its own phase now."""
    from analysis.report import build_report
    from loadgen.run import run_scenario
    from scenarios.bench import Bench, BenchParams
    from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

    fake = FakeOpenAIServer(StreamScript(ttft_s=0.01, itl_s=0.01))
    async with fake.serve():
        params = BenchParams(url=fake.url, rate="0.1000001,0.1", requests=1, input_len=8,
                             output_len=2, settle_s=0.2, scrape_interval_s=0.1)  # fmt: skip
        result = await run_scenario(Bench(), params, tmp_path / "run")
    assert result.status == "ok", result.error
    report = build_report(tmp_path / "run")
    assert report.summary.phases == ["r0.1000001", "r0.1"]
    phases = report.summary.cases["attached"].phases
    assert {name: (p.requests, p.ok) for name, p in phases.items()} == {
        "r0.1000001": (1, 1), "r0.1": (1, 1)}  # fmt: skip
