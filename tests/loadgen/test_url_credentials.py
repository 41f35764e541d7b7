"""A password in ``--url http://user:pw@host`` is in no run file and in nothing printed."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pydantic
import pytest
from rich.console import Console

from loadgen.redact import redact_command
from loadgen.run import run_scenario
from scenarios.bench import Bench, BenchParams
from server.net.urls import RedactingStream, redact_url, redact_urls_in
from server.process import free_loopback_port
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(120)]

SECRET = "s3cretpw"


def test_redact_url_keeps_the_user_and_masks_the_password() -> None:
    assert redact_url("http://user:s3cretpw@127.0.0.1:8000/x") == "http://user:***@127.0.0.1:8000/x"
    assert redact_url("https://tok@host") == "https://***@host"  # a lone token is a secret
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    text = "cannot reach http://a:b@h/health and 'http://c:d@k:1/metrics'"
    assert (
        redact_urls_in(text) == "cannot reach http://a:***@h/health and 'http://c:***@k:1/metrics'"
    )
    assert redact_command(["run", "--url", "http://u:pw@h", "--url=http://u:pw@h"]) == [
        "run", "--url", "http://u:***@h", "--url=http://u:***@h",
    ]  # fmt: skip


def test_the_console_prints_urls_without_their_password() -> None:
    out = io.StringIO()
    Console(file=RedactingStream(out), width=200).print(f"case attached: http://u:{SECRET}@h:1")  # type: ignore[arg-type]
    assert out.getvalue() == "case attached: http://u:***@h:1\n"


def _all_text(run_dir: Path) -> dict[Path, str]:
    found = {}
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if path.suffix == ".gz":
                data = gzip.decompress(data)
            found[path] = data.decode("utf-8", errors="replace")
    return found


@pytest.mark.asyncio
async def test_no_file_of_a_run_holds_the_password_of_its_url(tmp_path: Path) -> None:
    fake = FakeOpenAIServer(StreamScript())
    async with fake.serve():
        url = fake.url.replace("http://", f"http://user:{SECRET}@")
        params = BenchParams(
            url=url, requests=2, concurrency="1", input_len=4, output_len=2, settle_s=0.2,
            scrape_interval_s=0.1,
        )  # fmt: skip
        command = ["loadgen", "run", "bench", "--url", url]
        result = await run_scenario(Bench(), params, tmp_path / "run", command=command)
    assert result.status == "ok", result.error
    files = _all_text(tmp_path / "run")
    assert any("user:***@" in text for text in files.values())  # the URL is kept, masked
    assert [p for p, text in files.items() if SECRET in text] == []


@pytest.mark.asyncio
async def test_a_server_that_cannot_be_reached_is_reported_without_the_password(
    tmp_path: Path,
) -> None:
    url = f"http://user:{SECRET}@127.0.0.1:{free_loopback_port()}"
    params = BenchParams(url=url, requests=1, concurrency="1", input_len=4, output_len=2)
    result = await run_scenario(Bench(), params, tmp_path / "run", command=["run", "--url", url])
    assert result.status == "failed"
    assert result.error is not None and "user:***@127.0.0.1" in result.error
    assert SECRET not in result.error
    assert [p for p, text in _all_text(tmp_path / "run").items() if SECRET in text] == []


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        # The last '@' of the authority ends the user information (as urlsplit reads it).
        ("http://us@er:s3cretPW@127.0.0.1:1", "http://us@er:***@127.0.0.1:1"),
        # A space inside the password does not end it.
        ("http://user:s3cret PW@127.0.0.1:1/x", "http://user:***@127.0.0.1:1/x"),
        # No scheme: the authority is what precedes the first '/'.
        ("user:s3cretPW@127.0.0.1:1", "user:***@127.0.0.1:1"),
        ("token@127.0.0.1:1", "***@127.0.0.1:1"),
        ("http://127.0.0.1:8000/a@b", "http://127.0.0.1:8000/a@b"),
    ],
)
def test_redact_url_masks_every_password_shape(given: str, shown: str) -> None:
    assert redact_url(given) == shown


def test_free_text_masks_up_to_the_last_at_of_the_authority() -> None:
    text = "cannot reach http://us@er:s3cretPW@127.0.0.1:1/health: refused"
    assert redact_urls_in(text) == "cannot reach http://us@er:***@127.0.0.1:1/health: refused"


@pytest.mark.parametrize("url", ["http://user:s3cret PW@127.0.0.1:1", "user:s3cretPW@127.0.0.1:1"])
def test_a_bad_url_is_refused_without_repeating_its_password(url: str) -> None:
    # What the command line prints is the validator's message (its input is never shown).
    from scenarios.common import HttpUrlText

    with pytest.raises(pydantic.ValidationError) as err:
        pydantic.TypeAdapter(HttpUrlText).validate_python(url)
    [message] = [e["msg"] for e in err.value.errors()]
    assert "s3cret" not in message and "***@127.0.0.1:1" in message
