"""The embedded model's two variants (same KV bytes per token) and the ``auto`` choice between them.

Both variants have the KV geometry of a 7B-class model, 57,344 B of KV per token, so a cache
size in bytes holds the same number of tokens with either:

- ``bf16``: bfloat16, 4 attention heads, 4 KV heads: 28 × 4 × 128 × 2 (K, V) × 2 B;
- ``fp32``: float32, 2 attention heads, 2 KV heads: 28 × 2 × 128 × 2 (K, V) × 4 B.

They differ in speed only, and which is faster depends on the CPU: vLLM's CPU backend computes
bfloat16 with native instructions only where the CPU has AVX-512 BF16 (or AMX); elsewhere it
converts, and prefill is several times slower (SCENARIOS figures in the README). ``auto`` picks
from the CPU's flags (:func:`choose_variant`); the decision carries a reason that runs record.
"""

from __future__ import annotations

import functools
import os
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
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache per token: layers × KV heads × head_dim × 2 (K and V) × dtype."""
        return (
            COMMON_ARCHITECTURE["num_hidden_layers"]
            * self.num_key_value_heads
            * COMMON_ARCHITECTURE["head_dim"]
            * 2
            * self.dtype_bytes
        )

    def capacity_tokens(self, cache_bytes: int, block_size: int = CPU_BLOCK_SIZE) -> int:
        """Tokens a KV cache of ``cache_bytes`` holds: whole blocks × ``block_size``.

        vLLM sizes the pool as ``available_memory // bytes_per_block`` (``bytes_per_block`` =
        all layers' pages of one block, here ``block_size × kv_bytes_per_token``;
        ``vllm/v1/core/kv_cache_utils.py``) and reports ``num_gpu_blocks × block_size`` in
        ``vllm:cache_config_info``; e.g. 1 GiB → 146 blocks → 18,688 tokens, as seen there.
        """
        return cache_bytes // (block_size * self.kv_bytes_per_token) * block_size

    def architecture(self) -> dict[str, Any]:
        """The Llama config fields of this variant (``transformers.LlamaConfig`` kwargs)."""
        return {
            **COMMON_ARCHITECTURE,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
        }


VARIANTS: dict[str, ModelVariant] = {
    "bf16": ModelVariant("bf16", "bfloat16", 2, 4, 4),
    "fp32": ModelVariant("fp32", "float32", 4, 2, 2),
}

#: Bytes of KV per token of the embedded model, whichever variant (checked at import).
KV_BYTES_PER_TOKEN = VARIANTS["bf16"].kv_bytes_per_token
if any(v.kv_bytes_per_token != KV_BYTES_PER_TOKEN for v in VARIANTS.values()):
    raise AssertionError("the embedded model's variants must hold the same tokens per byte")

#: CPU flags (``/proc/cpuinfo``) under which vLLM computes bfloat16 natively.
BF16_NATIVE_FLAGS = ("avx512_bf16", "amx_bf16")


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


def choose_variant(
    choice: str,
    flags: frozenset[str] | None,
    aten_capability: str | None = None,
) -> VariantDecision:
    """Resolve ``auto | bf16 | fp32`` to a variant with the reason.

    ``auto`` picks ``bf16`` only where vLLM computes bfloat16 natively (a CPU flag of
    :data:`BF16_NATIVE_FLAGS`) and PyTorch is not forced below AVX-512 by
    ``ATEN_CPU_CAPABILITY``; everywhere else ``fp32``, which prefilled 6.5× faster on an
    AVX2-only EPYC (0.65 s vs 4.2 s for 1,056 tokens; figures in the README).

    Args:
        choice: ``"auto"``, ``"bf16"`` or ``"fp32"``.
        flags: the CPU's flags (:func:`read_cpu_flags`); ``None`` when unknown.
        aten_capability: the value of ``ATEN_CPU_CAPABILITY`` if set.

    Raises:
        ValueError: ``choice`` is not one of :data:`VARIANT_CHOICES`.
    """
    if choice in VARIANTS:
        return VariantDecision(choice, f"{choice} chosen explicitly (--model-variant {choice})")
    if choice != "auto":
        raise ValueError(f"model variant {choice!r}: expected one of {', '.join(VARIANT_CHOICES)}")
    if flags is None:
        return VariantDecision("fp32", "auto: CPU flags unknown; fp32 is never the slow one")
    native = [f for f in BF16_NATIVE_FLAGS if f in flags]
    if not native:
        return VariantDecision(
            "fp32", "auto: CPU has no avx512_bf16 or amx_bf16, so bfloat16 would be emulated"
        )
    if aten_capability is not None and not aten_capability.lower().startswith("avx512"):
        return VariantDecision(
            "fp32",
            f"auto: ATEN_CPU_CAPABILITY={aten_capability} forces PyTorch below AVX-512, "
            "so bfloat16 would be emulated",
        )
    return VariantDecision("bf16", f"auto: CPU has {' and '.join(native)} (native bfloat16)")


@functools.cache
def decide(choice: str) -> VariantDecision:
    """:func:`choose_variant` for this machine (its CPU flags and environment)."""
    return choose_variant(choice, read_cpu_flags(), os.environ.get("ATEN_CPU_CAPABILITY"))
