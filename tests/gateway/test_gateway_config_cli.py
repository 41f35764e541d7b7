"""Config validation, JSON loading, flag overrides, and the CLI running until interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import click
import pytest
from pydantic import ValidationError

from gateway.app import client_timeout
from gateway.cli import build_config, main
from gateway.config import GatewayConfig
from tests.support.signals import default_signals

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]


def test_config_is_frozen_forbids_extras_and_validates_upstreams() -> None:
    config = GatewayConfig(upstreams=("http://127.0.0.1:8000/",))
    assert config.upstreams == ("http://127.0.0.1:8000",)
    assert config.propagate_cancellation is True
    with pytest.raises(ValidationError):
        config.port = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        GatewayConfig.model_validate({"upstreams": ["http://a:1"], "bogus": 1})
    with pytest.raises(ValidationError):
        GatewayConfig.model_validate({"upstreams": ["http://a:1"], "timeouts": {"idle": 1}})
    for bad in ([], ["ftp://a:1"], ["http://a:1?x=1"], ["http://a:1", "http://a:1/"]):
        with pytest.raises(ValidationError):
            GatewayConfig.model_validate({"upstreams": bad})


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/"])
def test_an_upstream_ending_in_v1_is_refused_with_the_fix(url: str) -> None:
    # The client's path (/v1/completions) is appended: /v1/v1/completions would 404.
    with pytest.raises(ValidationError, match="drop /v1"):
        GatewayConfig.model_validate({"upstreams": [url]})


def test_client_session_timeout_is_explicit_and_has_no_total() -> None:
    config = GatewayConfig(upstreams=("http://127.0.0.1:1",), timeouts={"connect_s": 1.5})
    timeout = client_timeout(config)
    assert timeout.total is None  # aiohttp's 5-minute default would cut long generations
    assert (timeout.connect, timeout.sock_connect, timeout.sock_read) == (1.5, 1.5, None)


def test_json_file_with_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "gw.json"
    path.write_text(
        json.dumps(
            {
                "upstreams": ["http://127.0.0.1:8001"],
                "timeouts": {"idle_s": 7, "total_s": 100},
                "breaker": {"cooldown_s": 3},
            }
        )
    )
    assert GatewayConfig.from_json_file(path).timeouts.idle_s == 7
    config = build_config(  # as click passes them: a nested field's name joined by "__"
        str(path),
        {
            "upstreams": (),
            "port": 9000,
            "propagate_cancellation": False,
            "timeouts__idle_s": None,
            "timeouts__first_token_s": 2.5,
            "breaker__half_open_probes": 3,
        },
    )
    assert config.upstreams == ("http://127.0.0.1:8001",)
    assert config.port == 9000
    assert config.propagate_cancellation is False
    assert config.timeouts.idle_s == 7
    assert config.timeouts.first_token_s == 2.5
    assert config.timeouts.total_s == 100
    assert (config.breaker.cooldown_s, config.breaker.half_open_probes) == (3, 3)


def test_invalid_configuration_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "gw.json"
    path.write_text(json.dumps({"upstreams": ["http://127.0.0.1:1"], "extra": True}))
    with pytest.raises(click.UsageError):
        build_config(str(path), {})
    assert main(["--port", "1"]) == 2  # no upstream at all
    assert main(["--upstream", "not-a-url"]) == 2
    assert main(["--help"]) == 0


@pytest.mark.parametrize("inherited_sigint", ["default", "ignored"])
def test_cli_serves_until_interrupted(tmp_path: Path, inherited_sigint: str) -> None:
    # "ignored": how a process started from a background job (`make test &`, nohup) finds
    # SIGINT; the gateway must stop on it all the same (it once hung until killed).
    def child_setup() -> None:
        default_signals()  # "default" is default however this session was started
        if inherited_sigint == "ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "import sys; from gateway.cli import main; sys.exit(main())"
    events = tmp_path / "events.jsonl"
    args = [sys.executable, "-c", code, "--upstream", "http://127.0.0.1:9", "--port", "0"]
    args += ["--events-file", str(events), "--health-check-timeout", "0.5"]
    with subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
        preexec_fn=child_setup,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("gateway listening on http://127.0.0.1:"), line
            url = line.split()[3]
            # Nothing listens on port 9: the live check fails, so the gateway is not healthy.
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(url + "/health", timeout=5)
            assert info.value.code == 503
            body = json.load(info.value)
            assert body["status"] == "no_upstream"
            assert body["upstreams"][0]["reached"] is False
            assert events.read_text() == ""  # created at start; no transition yet
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)


def test_every_flag_built_from_the_config_model_reaches_its_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The flags are generated from GatewayConfig's fields: each value given lands in the
    # field its name says (nested ones too), and a flag not given leaves the default.
    import gateway.cli as cli

    seen: list[GatewayConfig] = []
    monkeypatch.setattr(cli, "_serve_forever", lambda config: seen.append(config))
    monkeypatch.setattr(cli, "run_event_loop", lambda _: None)
    argv = ["--upstream", "http://127.0.0.1:9", "--host", "127.0.0.2", "--port", "7",
            "--max-body-bytes", "11", "--max-response-bytes", "12",
            "--health-check-timeout", "0.25", "--connect-retries", "0",
            "--connect-timeout", "1.5", "--first-token-timeout", "2.5", "--idle-timeout", "3.5",
            "--total-timeout", "4.5", "--breaker-failures", "2", "--breaker-error-rate", "0.75",
            "--breaker-window", "6", "--breaker-min-requests", "3",
            "--breaker-slow-first-token", "0.5", "--breaker-cooldown", "0",
            "--breaker-probes", "4", "--max-in-flight", "5", "--max-queue", "0",
            "--queue-timeout", "8", "--no-propagate-cancellation"]  # fmt: skip
    assert main(argv) == 0
    (config,) = seen
    assert (config.host, config.port, config.max_body_bytes, config.max_response_bytes) == (
        "127.0.0.2", 7, 11, 12)  # fmt: skip
    assert (config.health_check_timeout_s, config.connect_retries) == (0.25, 0)
    assert config.propagate_cancellation is False
    t, b, a = config.timeouts, config.breaker, config.admission
    assert (t.connect_s, t.first_token_s, t.idle_s, t.total_s) == (1.5, 2.5, 3.5, 4.5)
    assert (b.consecutive_failures, b.error_rate, b.window_s, b.min_requests) == (2, 0.75, 6, 3)
    assert (b.slow_first_token_s, b.cooldown_s, b.half_open_probes) == (0.5, 0, 4)
    assert (a.max_in_flight, a.max_queue, a.queue_timeout_s) == (5, 0, 8)
    assert a.retry_after_s == 1 and config.shutdown_timeout_s == 5.0  # no flag: defaults
    # Bounds come from the fields: error_rate ∈ (0, 1], ports ≤ 65535.
    assert main(["--upstream", "http://127.0.0.1:9", "--breaker-error-rate", "0"]) == 2
    assert main(["--upstream", "http://127.0.0.1:9", "--port", "65536"]) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--idle-timeout", "nan"], "Invalid value for '--idle-timeout': 'nan' is not a finite"),
        (["--breaker-window", "inf"], "Invalid value for '--breaker-window': 'inf' is not a"),
        (["--breaker-error-rate", "0"],
         "invalid gateway configuration: --breaker-error-rate: Input should be greater than 0 "
         "(got 0.0)"),
        (["--port", "65536"], "--port: Input should be less than or equal to 65535 (got 65536)"),
    ],
)  # fmt: skip
def test_bad_flags_fail_in_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["--upstream", "http://127.0.0.1:9", *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_a_config_file_value_is_named_by_its_path_and_nan_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gw.json"
    path.write_text('{"upstreams": ["http://127.0.0.1:1"], "timeouts": {"idle_s": -1}}')
    assert main(["--config", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "invalid gateway configuration: timeouts.idle_s: Input should be greater than 0" in err
    # Python's JSON reader takes NaN and Infinity; no setting means anything at them.
    path.write_text('{"upstreams": ["http://127.0.0.1:1"], "timeouts": {"idle_s": NaN}}')
    assert main(["--config", str(path)]) == 2
    assert "NaN is not a JSON number: give a finite number" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--routing", "round-robin", "--routing-epsilon", "3"],
         "--routing-epsilon applies only with --routing prefix-hash; it would be ignored"),
        (["--routing-prefix-blocks", "4"],  # the default routing is least-loaded
         "--routing-prefix-blocks applies only with --routing prefix-hash; it would be ignored"),
        (["--routing", "least-loaded", "--routing-prefix-chars", "64"],
         "--routing-prefix-chars applies only with --routing prefix-hash; it would be ignored"),
        (["--slowdown-scope", "first-token"],
         "--slowdown-scope applies only with a --slowdown above 0; it would be ignored"),
        (["--slowdown", "0", "--slowdown-scope", "all"],
         "--slowdown-scope applies only with a --slowdown above 0; it would be ignored"),
    ],
)  # fmt: skip
def test_a_flag_the_configured_gateway_would_ignore_is_refused(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["--upstream", "http://127.0.0.1:9", *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_the_same_flags_are_taken_where_they_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.cli as cli

    seen: list[GatewayConfig] = []
    monkeypatch.setattr(cli, "_serve_forever", lambda config: seen.append(config))
    monkeypatch.setattr(cli, "run_event_loop", lambda _: None)
    argv = ["--upstream", "http://127.0.0.1:9", "--routing", "prefix-hash",
            "--routing-epsilon", "3", "--routing-prefix-blocks", "4",
            "--routing-prefix-chars", "64", "--slowdown", "0.15",
            "--slowdown-scope", "first-token"]  # fmt: skip
    assert main(argv) == 0
    (config,) = seen
    assert (config.routing_epsilon, config.routing_prefix_blocks) == (3.0, 4)
    assert (config.routing_prefix_chars, config.slowdown, config.slowdown_scope) == (
        64, 0.15, "first-token")  # fmt: skip
