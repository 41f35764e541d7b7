"""Parameters every scenario shares (server and measurement knobs) and their checks."""

from __future__ import annotations

import shlex
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from scenarios.arrivals import MAX_PHASE_REQUESTS
from scenarios.plan import REQUEST_TIMEOUT_S, STALL_TIMEOUT_S, ClientPriority
from scenarios.tokens import TokenSpace
from server.config import ServerConfig
from server.engines import EngineNotFoundError, check_version, project_engine, resolve_engine
from server.frozen import FrozenModel
from server.model_variant import COMMON_ARCHITECTURE, VariantChoice
from server.net.limits import METRICS_MAX_BYTES
from server.net.urls import redact_url
from server.priority import ENGINE_CORE_NICE, SERVER_GROUP_NICE
from server.sizes import parse_size


def _size_text(value: str) -> str:
    parse_size(value)  # raises ValueError with the accepted units
    return value


#: A byte size as typed on the command line ("1GiB"), validated but kept as text.
SizeText = Annotated[str, AfterValidator(_size_text)]


def _http_url(value: str) -> str:
    """``value`` if it is an http(s) base URL with a host, without a trailing slash.

    Raises:
        ValueError: another scheme, no host, a bad port, whitespace, or a query/fragment.
    """
    example = "e.g. http://127.0.0.1:8000"
    shown = redact_url(value)  # an error message never repeats a password
    try:
        parts = urlsplit(value.strip())
        port_ok = parts.port is None or parts.port > 0  # .port raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{shown!r} is not a valid URL ({exc}); {example}") from None
    if any(c.isspace() for c in value.strip()):
        raise ValueError(f"{shown!r} contains whitespace, which no URL may; {example}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown!r} is not an http(s) URL with a host; {example}")
    if not port_ok:
        raise ValueError(f"{shown!r}: port 0 is not a server port; {example}")
    if parts.query or parts.fragment:
        raise ValueError(f"{shown!r}: a base URL takes no query or fragment; {example}")
    path = parts.path.rstrip("/")
    if path == "/v1" or path.endswith("/v1") or "/v1/" in path:
        base = shown.strip()[: shown.strip().rfind("/v1")]
        raise ValueError(
            f"{shown!r}: drop /v1 ({base!r}); the client appends /v1/completions itself"
        )
    # Paths are appended to the base URL: a trailing slash would make "//v1/completions".
    return value.strip().rstrip("/")


#: The base URL of a server to attach to ("http://127.0.0.1:8000"), checked on the command
#: line so a typo fails before a run directory exists, and kept as text.
HttpUrlText = Annotated[str, AfterValidator(_http_url)]


def base_url(value: str) -> str:
    """``value`` checked as a server's base URL and normalised (no trailing slash), the rule
    of :data:`HttpUrlText` for URLs a command reads itself (``trace stats --worker-urls``).

    Raises:
        ValueError: one line saying what is wrong (scheme, host, port, /v1, whitespace).
    """
    return _http_url(value)


def same_server(a: str, b: str) -> bool:
    """Whether two validated base URLs name the same server (scheme, host and port, the
    default port filled in; host names compared as text, so ``localhost`` ≠ ``127.0.0.1``)."""

    def key(url: str) -> tuple[str, str, int, str]:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return parts.scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")

    return key(a) == key(b)


#: Floor of the scrape interval (s). vLLM renders /metrics in its API server process, on the
#: cores that serve the load; at the 0.25 s default one scrape costs a few ms of CPU, at
#: 0.05 s it is already 20 renders a second, and below that the scraper measures mostly
#: itself (and a tick cannot land before the previous scrape answered).
MIN_SCRAPE_INTERVAL_S = 0.05
#: Ceiling of the scrape interval (s): the run waits two intervals of baseline before load
#: and a fresh scrape after each phase, so an hour-long interval would hang it.
MAX_SCRAPE_INTERVAL_S = 60.0
#: Ceiling of a wait between phases (s): a typo like 1e11 would hang the run for ages.
MAX_WAIT_S = 3600.0
#: Ceiling of a duration or a timeout (s): one day.
MAX_RUN_S = 86400.0
#: Ceiling of requests in flight at once (a concurrency, an all-at-once burst): each holds a
#: client socket, and 1024 is the usual soft limit of open files (``ulimit -n``); far more
#: than a CPU vLLM serves at once, so beyond it a run floods rather than measures.
MAX_CONCURRENCY = 1024
#: Ceiling of the requests of one phase: at the CPU vLLM's pace (a few requests a second)
#: 100,000 already take hours; a typo of a few more zeros would never end. One constant with
#: the ceiling a late-bound rate's request count meets at run time.
MAX_REQUESTS = MAX_PHASE_REQUESTS
#: Ceiling of an open-loop arrival rate (req/s): above it the client's own send loop, not
#: the server, decides when requests leave.
MAX_RATE_RPS = 1000.0
#: Ceiling of a trace speedup: at 1000× a one-hour trace lasts 3.6 s; beyond it the client's
#: send loop, not the trace, decides when requests leave.
MAX_SPEEDUP = 1000.0
#: Ceiling of a rate given as a fraction of a measured throughput (slo-goodput's
#: ``--rate-fractions``): ten times what the server completes only measures a queue growing.
MAX_RATE_FRACTION = 10.0
#: Floor of the gamma shape of arrival gaps (``--burstiness``): its gaps have a coefficient of
#: variation 1/√shape, and below 0.01 numpy's gamma draws underflow to exactly 0 (0.07 % of
#: gaps at 0.01, 48 % at 0.001) until, at 1e-6, the mean gap is 1e-10 of 1/λ: the schedule
#: no longer has the rate asked for.
MIN_BURSTINESS = 0.01
#: Ceiling of a length in tokens (a prompt, an output, a prefix, a trace block): 2^20 =
#: 1,048,576, above the longest context any served model takes here and 512× the embedded
#: model's 2,048; a token-ID prompt that long is already ~7 MB of JSON per request.
MAX_TOKENS = 2**20
#: Ceiling of a cache size in tokens (``trace stats --cache-tokens``): 2^40 ≈ 1.1 × 10^12,
#: a PiB (``server.sizes.MAX_SIZE_BYTES``) at 1 KiB of KV per token, less than the smallest
#: model here needs.
MAX_CACHE_TOKENS = 2**40
#: Ceiling of KV bytes per token: 16 MiB, 30× the largest open model's (a 405B model with
#: 126 layers and 8 KV heads of 128 in bf16 takes 516 KiB).
MAX_KV_BYTES_PER_TOKEN = 2**24
#: Ceiling of a seed: 2^64 − 1, numpy's 64-bit seed words; every seed worth typing fits, and
#: a 30-digit typo is refused rather than hashed silently into another seed.
MAX_SEED = 2**64 - 1
#: Ceiling of the sampling temperature: 5× the OpenAI API's maximum of 2 (vLLM takes any
#: value ≥ 0); at 10 the logits of a model's typical few-unit spread differ by a factor
#: e^(spread/10) ≈ 1, so sampling is near uniform and higher values change nothing.
MAX_TEMPERATURE = 10.0
#: Ceiling of the gamma shape of arrival gaps (``--burstiness``): at 1000 the gaps vary by
#: 1/√1000 ≈ 3 %, already all but constant (``--arrival-pattern constant`` is exactly so).
MAX_BURSTINESS = 1000.0
#: Ceiling of a ratio or relative tolerance of a check (a TTFT ratio, a relative error):
#: 1000×, or 100,000 %, is past anything a check can still tell apart.
MAX_RATIO = 1000.0
#: Smallest /metrics size limit accepted: a vLLM page is ~50 KB, so a limit below 64 KiB
#: would fail every scrape of a real server.
MIN_METRICS_MAX_BYTES = 64 * 2**10
#: Largest /metrics size limit accepted: 1 GiB, 20,000 times a vLLM page; above it the limit
#: no longer bounds the scraper's memory.
MAX_METRICS_MAX_BYTES = 2**30
#: Ceiling of a context (tokens): 2^20, the longest contexts served today are about a
#: million tokens, and one prompt that long is already ~36 MB of Python ints in the client
#: and a ~7 MB request body.
MAX_MODEL_LEN = 2**20
#: Ceiling of ``--token-id-high``: 2^31, far above any vocabulary in use (the largest are
#: about 2^18 entries); the draws are int64.
MAX_TOKEN_ID = 2**31
#: The embedded model's vocabulary: token IDs at or above it fail every request.
EMBEDDED_VOCAB = COMMON_ARCHITECTURE["vocab_size"]


class ServerParams(FrozenModel):
    """Knobs of how a vLLM server is started (each a ``--flag``), shared by every scenario and
    ``loadgen server start``, so a knob has one name on every command."""

    # allow_inf_nan=False: an infinite settle or duration would hang the run.
    model_config = ConfigDict(allow_inf_nan=False)

    max_model_len: int = Field(
        default=2048,
        gt=0,
        le=MAX_MODEL_LEN,
        description=f"Server context (tokens, ≤ {MAX_MODEL_LEN:,}).",
    )
    enforce_eager: bool = Field(
        default=True,
        description="Start vLLM without torch.compile (--no-enforce-eager: compile, a "
        "slower start).",
    )
    model: str | None = Field(
        default=None, min_length=1, description="Model dir; default: embedded model."
    )
    model_variant: VariantChoice = Field(
        default="auto",
        description="Embedded model: auto (the faster on this CPU), bf16 or fp32 (same KV).",
    )
    vllm: str | None = Field(
        default=None,
        min_length=1,
        description="vLLM version to serve with: the project's own or one installed by "
        "`make engine VLLM=X`.",
    )
    engine_python: str | None = Field(
        default=None,
        min_length=1,
        description="Interpreter of a vLLM installed elsewhere (instead of --vllm).",
    )
    vllm_args: str | None = Field(
        default=None,
        description="Extra vLLM arguments, one shell-quoted string, appended last (they win).",
    )
    engine_core_nice: int = Field(
        default=ENGINE_CORE_NICE,
        ge=0,
        le=19,
        description="Nice value for vLLM's busy-waiting engine-core process, so the load "
        "generator on the same cores wakes on time (0: as vLLM starts it).",
    )
    server_group_nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description=f"Nice value of the vLLM server's session (its autogroup) against the load "
        f"generator's, e.g. {SERVER_GROUP_NICE}: the client's timing improves but vLLM slows "
        "(0: as vLLM starts it).",
    )

    @model_validator(mode="after")
    def _engine_installed(self) -> Any:
        # Fails on the command line, before any start, with the install command.
        try:
            self.engine_python_path()
        except EngineNotFoundError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_validator("vllm")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        # Before it reaches a path or the `make engine` command an error would suggest.
        return None if value is None else check_version(value)

    @field_validator("vllm_args")
    @classmethod
    def _shell_words(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                shlex.split(value)
            except ValueError as exc:  # unbalanced quotes
                raise ValueError(f"not shell words: {exc}") from None
        return value

    def engine_python_path(self) -> str | None:
        """The interpreter the servers run in; ``None`` for the project's own.

        Raises:
            server.engines.EngineNotFoundError: the chosen engine is not installed.
        """
        if not self.vllm and not self.engine_python:
            return None
        engine = resolve_engine(self.vllm, self.engine_python)
        try:
            own = project_engine().python
        except EngineNotFoundError:
            own = None
        return None if engine.python == own else engine.python

    def server(self, cache_bytes: int, **extra: Any) -> ServerConfig:
        """The server configuration for a case with ``cache_bytes`` of KV cache; ``extra``:
        more ``ServerConfig`` fields (its ``extra_args`` come before ``--vllm-args``)."""
        extra = dict(extra)
        args = (*extra.pop("extra_args", ()), *shlex.split(self.vllm_args or ""))
        return ServerConfig(
            model=self.model,
            model_variant=self.model_variant,
            kv_cache_bytes=cache_bytes,
            max_model_len=self.max_model_len,
            enforce_eager=self.enforce_eager,
            python=self.engine_python_path(),
            extra_args=args,
            engine_core_nice=self.engine_core_nice,
            server_group_nice=self.server_group_nice,
            **extra,
        )


class RunParams(ServerParams):
    """Knobs of how the server runs and how the run is measured (each a ``--flag``).

    Scenario parameter models extend this; their own fields come first on the command line.
    """

    settle_s: float = Field(
        default=1.0,
        ge=0,
        le=MAX_WAIT_S,
        description=f"Wait after each phase (s, ≤ {MAX_WAIT_S:g}).",
    )
    scrape_interval_s: float = Field(
        default=0.25,
        ge=MIN_SCRAPE_INTERVAL_S,
        le=MAX_SCRAPE_INTERVAL_S,
        description=f"/metrics period (s, {MIN_SCRAPE_INTERVAL_S:g}-{MAX_SCRAPE_INTERVAL_S:g}: "
        "faster scrapes load the server they measure).",
    )
    metrics_max_bytes: int = Field(
        default=METRICS_MAX_BYTES,
        ge=MIN_METRICS_MAX_BYTES,
        le=MAX_METRICS_MAX_BYTES,
        description=f"Largest /metrics answer (bytes, default {METRICS_MAX_BYTES} = 4 MiB): a "
        "larger page is a failed scrape, never read past the limit.",
    )
    request_timeout_s: float = Field(
        default=REQUEST_TIMEOUT_S,
        gt=0,
        le=MAX_RUN_S,
        description="A request not complete this long after its send fails (s).",
    )
    stall_timeout_s: float = Field(
        default=STALL_TIMEOUT_S,
        gt=0,
        le=MAX_RUN_S,
        description="A request with no byte from the server this long fails as 'stalled' (s; "
        "also the wait for the first byte, so above the longest queueing wait).",
    )
    seed: int = Field(
        default=0,
        ge=0,
        le=MAX_SEED,
        description="Seed of all prompt tokens (and arrivals; numpy's are ≥ 0).",
    )
    token_id_high: int = Field(
        default=4000,
        gt=10,
        le=MAX_TOKEN_ID,
        description="Prompt token IDs below this (the embedded model's vocabulary: "
        f"{EMBEDDED_VOCAB:,}).",
    )
    client_priority: ClientPriority = Field(
        default="auto",
        description="auto: for a server on this host whose compute cores are known and leave "
        "one free, the load generator off them, its sending thread real-time (SCHED_FIFO); "
        "otherwise (a server elsewhere included) as the kernel places it. realtime: "
        "real-time in any case; normal: as the kernel places it.",
    )

    @model_validator(mode="after")
    def _stall_within_request_timeout(self) -> Any:
        if self.stall_timeout_s > self.request_timeout_s:
            raise ValueError(
                f"stall_timeout_s ({self.stall_timeout_s:g}) must not exceed "
                f"request_timeout_s ({self.request_timeout_s:g})"
            )
        return self

    @model_validator(mode="after")
    def _settle_covers_two_scrapes(self) -> Any:
        if self.settle_s < 2 * self.scrape_interval_s:
            raise ValueError(
                f"settle_s ({self.settle_s}) must be at least two scrape intervals "
                f"({2 * self.scrape_interval_s}) so counters catch up"
            )
        return self

    def check_fits(self, prompt_tokens: int, output_tokens: int) -> None:
        """Raises ValueError when a request would not fit the server's context."""
        if prompt_tokens + output_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({prompt_tokens}) + output ({output_tokens}) tokens exceed "
                f"max_model_len {self.max_model_len}"
            )

    def plan_fields(self) -> dict[str, Any]:
        """The ``Plan`` fields these knobs decide."""
        return {
            "seed": self.seed,
            "tokens": TokenSpace(high=self.token_id_high),
            "scrape_interval_s": self.scrape_interval_s,
            "metrics_max_bytes": self.metrics_max_bytes,
            "request_timeout_s": self.request_timeout_s,
            "stall_timeout_s": self.stall_timeout_s,
            "client_priority": self.client_priority,
        }
