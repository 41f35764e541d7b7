"""The embedded model's two variants (same KV bytes per token) and the ``auto`` choice between them.

Both variants have the KV geometry of a 7B-class model, 57,344 B of KV per token, so a cache
size in bytes holds the same number of tokens with either:

- ``bf16``: bfloat16, 4 attention heads, 4 KV heads: 28 × 4 × 128 × 2 (K, V) × 2 B;
- ``fp32``: float32, 2 attention heads, 2 KV heads: 28 × 2 × 128 × 2 (K, V) × 4 B.

They differ in speed only, and which is faster depends on the CPU: without AVX-512 BF16 vLLM's
CPU backend prefills bfloat16 6.5x slower than the float32 variant, with it still 1.5x slower;
only AMX has bfloat16-only kernels. ``auto`` picks from the CPU's flags (:func:`choose_variant`);
the decision carries a reason that runs record.

Draft models for speculative decoding (:class:`DraftSpec`) follow the variant they draft for:
vLLM runs a draft in the target's dtype, so a draft has the variant's dtype, heads, hidden size
and vocabulary, only fewer layers; its KV also lives in the cache (per token: its layers × the
variant's per-layer KV bytes), which lowers the capacity (:meth:`ModelVariant.capacity_tokens`).

See docs/embedded-model.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: Tokens per KV block on vLLM's CPU backend (its fixed block size).
CPU_BLOCK_SIZE = 128

#: What a user may ask for on the command line.
VariantChoice = Literal["auto", "bf16", "fp32"]
VARIANT_CHOICES: tuple[str, ...] = ("auto", "bf16", "fp32")

#: Geometry both variants share (tokenizer vocabulary included).
COMMON_ARCHITECTURE: dict[str, Any] = {
    "vocab_size": 4096,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 28,
    "head_dim": 128,
    "max_position_embeddings": 4096,
}


@dataclass(frozen=True)
class ModelVariant:
    """One variant of the embedded model.

    Attributes:
        name: ``"bf16"`` or ``"fp32"`` (the command-line value).
        dtype: vLLM's ``--dtype`` and the weights' dtype (``"bfloat16"``, ``"float32"``).
        dtype_bytes: bytes per KV element in that dtype.
        num_attention_heads: query heads.
        num_key_value_heads: KV heads (the KV cache stores these).
    """

    name: str
    dtype: str
    dtype_bytes: int
    num_attention_heads: int
    num_key_value_heads: int

    @property
    def kv_bytes_per_layer_token(self) -> int:
        """Bytes of KV cache per token and layer: KV heads × head_dim × 2 (K and V) × dtype."""
        return self.num_key_value_heads * COMMON_ARCHITECTURE["head_dim"] * 2 * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache per token: layers × KV heads × head_dim × 2 (K and V) × dtype."""
        return COMMON_ARCHITECTURE["num_hidden_layers"] * self.kv_bytes_per_layer_token

    def capacity_tokens(
        self, cache_bytes: int, block_size: int = CPU_BLOCK_SIZE, draft_layers: int = 0
    ) -> int:
        """Tokens a KV cache of ``cache_bytes`` holds: whole blocks × ``block_size``.

        vLLM sizes the pool as ``available_memory // bytes_per_block`` (``bytes_per_block`` =
        all layers' pages of one block, here ``block_size × kv_bytes_per_token``;
        ``vllm/v1/core/kv_cache_utils.py``) and reports ``num_gpu_blocks × block_size`` in
        ``vllm:cache_config_info``; e.g. 1 GiB → 146 blocks → 18,688 tokens, as seen there.
        A draft model's ``draft_layers`` join the same pages (one KV group: same head
        geometry), so each block costs their bytes too: 1 GiB with a 2-layer draft →
        2^30 // (128 × 30 × 2,048 B) = 136 blocks → 17,408 tokens, as seen on vLLM 0.32.0.
        """
        per_token = self.kv_bytes_per_token + draft_layers * self.kv_bytes_per_layer_token
        return cache_bytes // (block_size * per_token) * block_size

    def architecture(self, layers: int | None = None) -> dict[str, Any]:
        """The Llama config fields of this variant (``transformers.LlamaConfig`` kwargs);
        ``layers`` overrides the layer count (a draft's)."""
        arch = {
            **COMMON_ARCHITECTURE,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
        }
        if layers is not None:
            arch["num_hidden_layers"] = layers
        return arch


VARIANTS: dict[str, ModelVariant] = {
    "bf16": ModelVariant("bf16", "bfloat16", 2, 4, 4),
    "fp32": ModelVariant("fp32", "float32", 4, 2, 2),
}

#: Bytes of KV per token of the embedded model, whichever variant (checked at import).
KV_BYTES_PER_TOKEN = VARIANTS["bf16"].kv_bytes_per_token
if any(v.kv_bytes_per_token != KV_BYTES_PER_TOKEN for v in VARIANTS.values()):
    raise AssertionError("the embedded model's variants must hold the same tokens per byte")

#: CPU flag (``/proc/cpuinfo``) under which ``auto`` picks bf16: vLLM's CPU backend has
#: bfloat16-only AMX kernels (attention ISA "amx" and the sgl-kernel GEMM are chosen only for
#: bfloat16 when ``torch.cpu._is_amx_tile_supported()``; ``vllm/v1/attention/backends/
#: cpu_attn.py``, ``vllm/model_executor/layers/utils.py``). Unmeasured here: no AMX machine.
BF16_FASTER_FLAG = "amx_bf16"


@dataclass(frozen=True)
class VariantDecision:
    """Which variant a server runs and why (recorded in ``server.json`` and ``run.json``)."""

    variant: str
    reason: str

    @property
    def model_variant(self) -> ModelVariant:
        return VARIANTS[self.variant]

    def as_dict(self) -> dict[str, str]:
        """``{"variant": "bf16" | "fp32", "reason": "..."}``."""
        return {"variant": self.variant, "reason": self.reason}


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The first processor's ``flags`` from ``/proc/cpuinfo``; ``None`` where there is none."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def choose_variant(choice: str, flags: frozenset[str] | None) -> VariantDecision:
    """Resolve ``auto | bf16 | fp32`` to a variant with the reason.

    ``auto`` picks ``fp32`` unless the CPU has AMX-BF16: without AMX, float32 prefills faster
    than bfloat16; with AMX, vLLM runs bfloat16 on AMX tiles. The measurements behind the rule
    are in docs/embedded-model.md.

    Args:
        choice: ``"auto"``, ``"bf16"`` or ``"fp32"``.
        flags: the CPU's flags (:func:`read_cpu_flags`); ``None`` when unknown.

    Raises:
        ValueError: ``choice`` is not one of :data:`VARIANT_CHOICES`.
    """
    if choice in VARIANTS:
        return VariantDecision(choice, f"{choice} chosen explicitly (--model-variant {choice})")
    if choice != "auto":
        raise ValueError(f"model variant {choice!r}: expected one of {', '.join(VARIANT_CHOICES)}")
    if flags is None:
        return VariantDecision("fp32", "auto: CPU flags unknown; fp32 (faster without AMX)")
    if BF16_FASTER_FLAG in flags:
        return VariantDecision("bf16", "auto: CPU has amx_bf16; vLLM runs bfloat16 on AMX")
    bf16_kind = "AVX-512 BF16" if "avx512_bf16" in flags else "no AVX-512 BF16"
    return VariantDecision(
        "fp32",
        f"auto: no AMX ({bf16_kind}); fp32 prefills faster on such CPUs "
        "(1.5x with AVX-512 BF16, 6.5x on AVX2 only)",
    )


@functools.cache
def decide(choice: str) -> VariantDecision:
    """:func:`choose_variant` for this machine's CPU flags."""
    return choose_variant(choice, read_cpu_flags())


#: How an embedded draft model gets its weights (``server.embedded_model.build_draft``).
DraftKind = Literal["random", "truncated", "echo"]
DRAFT_KINDS: tuple[str, ...] = ("random", "truncated", "echo")


@dataclass(frozen=True)
class DraftSpec:
    """An embedded draft model: ``kind`` of weights, ``layers`` decoder layers.

    - ``random``: seeded random weights (a seed of its own), unrelated to the target: its
      proposals are (almost) never the target's choice; it only costs.
    - ``truncated``: the target's first ``layers`` layers with the target's embeddings,
      final norm and head (an early exit of the target).
    - ``echo``: the target's embeddings, ``layers`` layers whose output projections are zero
      (each block adds nothing to the residual stream) and a head of the unit-normalised
      embeddings, so it always proposes the last token again. It is right wherever the
      target repeats one token, wrong wherever it does anything else.

    The three cost the same per step for a given ``layers`` (same shapes, same FLOPs), so a
    draft cost measured with one holds for the others.
    """

    kind: str
    layers: int

    def __post_init__(self) -> None:
        if self.kind not in DRAFT_KINDS:
            raise ValueError(f"draft kind {self.kind!r}: expected one of {', '.join(DRAFT_KINDS)}")
        target_layers = COMMON_ARCHITECTURE["num_hidden_layers"]
        if not 1 <= self.layers < target_layers:
            raise ValueError(f"draft layers {self.layers}: expected 1 to {target_layers - 1}")

    @property
    def name(self) -> str:
        """``{kind}-{layers}l``, e.g. ``random-2l`` (directory names and labels)."""
        return f"{self.kind}-{self.layers}l"
