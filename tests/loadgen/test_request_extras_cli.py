"""``loadgen run bench --header/--extra-body``: refused in one line before anything starts, and
credentials sent but never written: not to any run file, not to the console."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from tests.support.fake_in_thread import fake_in_thread
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).parents[2]
#: Nothing listens there: a refusal must come before any connection is tried.
NOWHERE = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        ("--header=Content-Length: 5",
         "--header: header Content-Length is set by the client itself (framing or coding of "
         "the request)"),
        ("--header=Transfer-Encoding: chunked",
         "--header: header Transfer-Encoding is hop-by-hop (it describes one connection): it "
         "is not sent"),
        ("--header=X-Key: sek\x01rit",
         "--header: header X-Key: its value holds \\x01; a value is visible ASCII"),
        ("--header=X-Big: " + "a" * 100_000,
         "--header: header X-Big is 100,005 bytes, name and value; at most 4,096"),
        ('--extra-body={"max_tokens": 30}',
         "--extra-body: may not set 'max_tokens': the plan sets it (the output length, "
         "--output-len)"),
        ('--extra-body={"n": 2}', "--extra-body: may not set 'n': it changes what one response"),
        ('--extra-body={"stop": ["."]}',
         "--extra-body may not set 'stop' with --ignore-eos: it ends outputs early"),
        ('--extra-body={"top_p": NaN}', "--extra-body: NaN is not a JSON number"),
        ('--extra-body={"priority": 1e999}',
         "--extra-body: 1e999 is beyond the largest finite number"),
    ],
)  # fmt: skip
def test_a_bad_header_or_extra_body_is_one_line_before_anything_starts(
    tmp_path: Path, flag: str, error: str
) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "bench", "--url", NOWHERE, "--out", str(out), flag])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("Error:")]
    assert line.startswith(f"Error: {error}"), line
    assert "sek\x01rit" not in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_stop_is_allowed_without_ignore_eos(tmp_path: Path) -> None:
    # The refusal is about exact lengths: without them the same field passes validation and
    # the run fails only for the server nobody runs at port 9.
    result = CliRunner().invoke(main, [
        "run", "bench", "--url", NOWHERE, "--out", str(tmp_path / "run"), "--no-ignore-eos",
        '--extra-body={"stop": ["."]}',
    ])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "may not set" not in result.output
    assert "ServerStartError: cannot reach http://127.0.0.1:9/health" in result.output


#: Secrets under the names the old list did not know, and under the ones it did.
HEADERS = {
    "X-JWT": "jwt-sekrit-1",
    "X-Bearer": "bearer-sekrit-2",
    "X-Signature": "sig-sekrit-3",
    "Authorization": "Bearer auth-sekrit-4",
    "X-Trace": "Bearer trace-sekrit-5",  # a harmless name, but the value reads as a credential
    "X-Plain": "plain-value",  # kept as written
}
EXTRA = {"priority": 1, "api_key": "body-sekrit-6", "vllm_xargs": {"access_token": "body-sekrit-7"}}


def _all_text(run_dir: Path) -> dict[Path, str]:
    found = {}
    for path in run_dir.rglob("*"):
        if path.is_file() and path.suffix != ".png":
            data = path.read_bytes()
            if path.suffix == ".gz":
                data = gzip.decompress(data)
            found[path] = data.decode("utf-8", errors="replace")
    return found


def test_credentials_are_sent_and_written_nowhere(tmp_path: Path) -> None:
    # One bench run of 2 requests through the command line: the fake server sees every
    # header and body field as given; run.json, plan.json, manifest.json, report.md/json,
    # every other file and the console hold none of the 7 secrets, and keep the plain value.
    run_dir = tmp_path / "run"
    flags = [f"--header={k}: {v}" for k, v in HEADERS.items()]
    flags += ["--extra-body", json.dumps(EXTRA)]
    with fake_in_thread(FakeOpenAIServer(StreamScript())) as fake:
        done = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "run", "bench", "--url", fake.url,
             "--requests", "2", "--input-len", "4", "--output-len", "2", "--settle-s", "0.2",
             "--scrape-interval-s", "0.1", "--out", str(run_dir), *flags],
            cwd=ROOT, capture_output=True, text=True, timeout=100,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    completions = [seen for seen in fake.seen if seen.path == "/v1/completions"]
    assert len(completions) == 2  # the rest: the attach's /v1/models
    for seen in completions:
        assert seen.headers is not None and seen.body is not None
        assert {k: seen.headers[k] for k in HEADERS} == HEADERS
        assert {k: seen.body[k] for k in EXTRA} == EXTRA
    secrets = [v.split()[-1] for k, v in HEADERS.items() if k != "X-Plain"]
    secrets += ["body-sekrit-6", "body-sekrit-7"]
    files = _all_text(run_dir)
    assert {"run.json", "plan.json", "manifest.json", "report.md", "report.json"} <= {
        p.name for p in files
    }
    leaks = {p.name: s for p, text in files.items() for s in secrets if s in text}
    assert leaks == {}
    console = done.stdout + done.stderr
    assert [s for s in secrets if s in console] == []
    plan = files[run_dir / "plan.json"]
    assert "plain-value" in plan and "<redacted>" in plan
    assert "X-JWT" in files[run_dir / "run.json"]  # the names stay: what was sent is known
