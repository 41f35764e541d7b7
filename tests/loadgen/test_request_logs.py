"""A case keeps what each replica's vLLM logged while it ran (``loadgen.case.request_logs``):
the bytes appended after the case's mark, per replica, in the replica's directory of the case;
and a case that records KV-cache events starts its replicas logging each request's id."""

from __future__ import annotations

from pathlib import Path

from loadgen.case.request_logs import mark_request_logs
from loadgen.kvevents.hub import KvEventHub
from server.config import ServerConfig


def test_only_the_lines_logged_during_the_case_are_kept(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log0, log1 = logs / "r0.log", logs / "r1.log"
    log0.write_text("case before: Received request cmpl-a-0: params: x\n")  # 13+17+8+10+2 bytes
    marks = mark_request_logs([log0, None, log1])  # replica 1 attached, replica 2 not started
    assert [(k, size) for k, _, size in marks.marks] == [(0, 50), (2, 0)]
    with log0.open("a") as f:
        f.write("Received request cmpl-b-0: params: y\n")
    log1.write_text("Received request cmpl-c-0: params: z\n")
    cdir = tmp_path / "case"
    marks.copy_into(cdir)
    assert (cdir / "vllm_requests.log").read_text() == "Received request cmpl-b-0: params: y\n"
    assert (cdir / "replicas/2/vllm_requests.log").read_text() == (
        "Received request cmpl-c-0: params: z\n"
    )
    assert not (cdir / "replicas/1").exists()


def test_a_log_gone_before_the_copy_leaves_no_file(tmp_path: Path) -> None:
    log = tmp_path / "r0.log"
    log.write_text("x\n")
    marks = mark_request_logs([log])
    log.unlink()
    marks.copy_into(tmp_path / "case")
    assert not (tmp_path / "case" / "vllm_requests.log").exists()


async def test_a_replica_recording_kv_events_logs_the_ids_it_receives() -> None:
    hub = KvEventHub(drain_s=0)
    try:
        argv = hub.config_for(ServerConfig(), 0).command("python", "/m", 8000)
    finally:
        await hub.aclose()
    # --max-log-len 0: no prompt text or token IDs, even at DEBUG
    assert argv[argv.index("--enable-log-requests") :][:3] == [
        "--enable-log-requests", "--max-log-len", "0"]  # fmt: skip
    assert "--enable-log-requests" not in ServerConfig().command("python", "/m", 8000)
