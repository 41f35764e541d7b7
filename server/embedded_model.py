"""Building the embedded default model: a random-weight Llama with a 7B-class KV geometry.

Outputs are gibberish; what matters is that vLLM's scheduling, caching, preemption and timings
are real and that a KV cache size in bytes holds the same number of tokens as on a 7B model
(57,344 B per token, so 1 GiB ≈ 18.7k tokens). Hidden size and MLP stay tiny so a CPU runs it
quickly. Two variants with that same KV size exist (``server.model_variant``): bfloat16 with
4 KV heads and float32 with 2.

Each variant is built locally and reproducibly (seeded weights) into its own cache directory
on first use and reused afterwards. The tokenizer (byte-level BPE trained on seeded generated
text) is built once into a directory of its own and copied into every variant, so both speak
exactly the same token IDs. Building imports torch and transformers, so it runs in a child
process (``python -m server.embedded_model``) to keep the load generator's process light.

Draft models for speculative decoding (``server.model_variant.DraftSpec``) are built the same
way, per variant (a draft runs in its target's dtype), into directories named after the
target's build, the draft's kind and layers and ``DRAFT_BUILD_VERSION``: ``random`` from a
seed of its own, ``truncated`` and ``echo`` from the target's own weights
(:func:`truncated_state`, :func:`echo_state`), so they are built after the target.

See docs/embedded-model.md.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.model_variant import (
    COMMON_ARCHITECTURE,
    DRAFT_KINDS,
    KV_BYTES_PER_TOKEN,
    VARIANTS,
    DraftSpec,
    ModelVariant,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "KV_BYTES_PER_TOKEN",
    "cache_root",
    "draft_dir",
    "ensure_draft_model",
    "ensure_embedded_model",
    "model_dir",
]

MODEL_NAME = "testbed-llama-7bkv"
#: Bump when anything below changes: the cache directory names carry it.
#: v2: two variants (bf16, fp32) in separate directories, one shared tokenizer.
BUILD_VERSION = 2
SEED = 1234
#: Bump when a draft's construction changes: draft directory names carry it.
DRAFT_BUILD_VERSION = 1
#: Seed of ``random`` drafts: not the target's, so their weights are unrelated to it.
DRAFT_SEED = SEED + 1

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def cache_root() -> Path:
    """Where built models live: ``$SERVING_TESTBED_CACHE`` or ``~/.cache/serving-testbed``."""
    root = os.environ.get("SERVING_TESTBED_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "serving-testbed"


def model_dir(variant: str = "bf16") -> Path:
    """Where the embedded model's ``variant`` lives once built (versioned by ``BUILD_VERSION``).

    Raises:
        KeyError: ``variant`` is not ``"bf16"`` or ``"fp32"`` (resolve ``auto`` first).
    """
    if variant not in VARIANTS:
        raise KeyError(f"unknown model variant {variant!r}; known: {', '.join(VARIANTS)}")
    return cache_root() / "models" / f"{MODEL_NAME}-{variant}-v{BUILD_VERSION}"


def tokenizer_dir() -> Path:
    """Where the shared tokenizer lives once built."""
    return cache_root() / "models" / f"{MODEL_NAME}-tokenizer-v{BUILD_VERSION}"


def draft_dir(draft: DraftSpec, variant: str) -> Path:
    """Where ``draft`` for the embedded model's ``variant`` lives once built.

    The name carries the target's build (truncated and echo drafts are made of its weights),
    the draft's kind and layers and ``DRAFT_BUILD_VERSION``.

    Raises:
        KeyError: ``variant`` is not ``"bf16"`` or ``"fp32"``.
    """
    target = model_dir(variant)
    return target.parent / f"{target.name}-draft-{draft.name}-d{DRAFT_BUILD_VERSION}"


def _ensure_built(out: Path, args: list[str], what: str, python: str) -> Path:
    """``out`` once ``python -m server.embedded_model ARGS --out OUT`` has built it (if it had
    to). A file lock makes concurrent callers (parallel test workers, two CLIs) build it once.

    Raises:
        RuntimeError: the build failed; the message carries the builder's output.
    """
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "config.json").exists():
            return out
        proc = subprocess.run(
            [python, "-m", "server.embedded_model", *args, "--out", str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise RuntimeError(f"building {what} failed:\n{tail}")
    return out


def ensure_embedded_model(variant: str, python: str = sys.executable) -> Path:
    """Return the directory of the embedded model's ``variant``, building it if it is missing.

    Raises:
        KeyError: unknown ``variant``.
        RuntimeError: the build failed; the message carries the builder's output.
    """
    return _ensure_built(
        model_dir(variant), ["--variant", variant], f"the embedded model ({variant})", python
    )


def ensure_draft_model(draft: DraftSpec, variant: str, python: str = sys.executable) -> Path:
    """Return the directory of ``draft`` for ``variant``, building it (and, first, the target
    it derives from) if missing.

    Raises:
        KeyError: unknown ``variant``.
        RuntimeError: a build failed; the message carries the builder's output.
    """
    ensure_embedded_model(variant, python)
    args = ["--variant", variant, "--draft", draft.kind, "--draft-layers", str(draft.layers)]
    return _ensure_built(
        draft_dir(draft, variant), args, f"the {draft.name} draft ({variant})", python
    )


def _training_corpus(rng: random.Random, n_lines: int = 4000) -> list[str]:
    """Seeded pseudo-text: words made of syllables, so BPE learns real merges."""
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"] + ["th", "st", "qu", "ng"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)]
    punctuation = [".", ",", "!", "?", ";", ""]
    return [
        " ".join(rng.choices(words, k=rng.randint(5, 25))) + rng.choice(punctuation)
        for _ in range(n_lines)
    ]


def _atomic_dir(out: Path, fill: Callable[[Path], object]) -> None:
    """Fill a temp dir next to ``out`` with ``fill(tmp)``, then rename it to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        fill(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def build_tokenizer(out: Path) -> None:
    """Train the byte-level BPE tokenizer (vocab 4,096) and save it into ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(SEED)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=COMMON_ARCHITECTURE["vocab_size"],
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = _CHAT_TEMPLATE
    _atomic_dir(out, lambda tmp: fast.save_pretrained(tmp))


def _special_ids() -> dict[str, int]:
    """Token IDs of the tokenizer's special tokens (built first if it is missing)."""
    tokenizer = tokenizer_dir()
    if not (tokenizer / "tokenizer.json").exists():
        build_tokenizer(tokenizer)
    special = json.loads((tokenizer / "tokenizer.json").read_text())["added_tokens"]
    return {t["content"]: t["id"] for t in special}


def _save(out: Path, model: object, facts: dict[str, object]) -> None:
    """Save ``model`` (``save_pretrained``), a copy of the tokenizer and ``facts`` (as
    ``testbed_model.json``) into ``out``, atomically."""

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)  # type: ignore[attr-defined]
        for item in tokenizer_dir().iterdir():
            shutil.copy2(item, tmp / item.name)
        (tmp / "testbed_model.json").write_text(json.dumps(facts, indent=2))

    _atomic_dir(out, fill)


def build(out: Path, variant: ModelVariant) -> None:
    """Build ``variant`` into ``out`` (atomically), with a copy of the shared tokenizer.

    The tokenizer is built first if it is missing (callers hold the build lock).
    """
    model = _random_model(variant, SEED, variant.architecture())
    facts = {
        "name": MODEL_NAME,
        "variant": variant.name,
        "dtype": variant.dtype,
        "build_version": BUILD_VERSION,
        "seed": SEED,
        "architecture": variant.architecture(),
        "kv_bytes_per_token": variant.kv_bytes_per_token,
    }
    _save(out, model, facts)


def _llama_config(architecture: dict[str, Any]) -> Any:
    from transformers import LlamaConfig

    ids = _special_ids()
    return LlamaConfig(
        **architecture,
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        tie_word_embeddings=False,
    )


def _random_model(variant: ModelVariant, seed: int, architecture: dict[str, Any]) -> Any:
    """A Llama of ``architecture`` with seeded random weights, in the variant's dtype."""
    import torch
    from transformers import LlamaForCausalLM

    config = _llama_config(architecture)
    torch.manual_seed(seed)
    dtype = getattr(torch, variant.dtype)
    model = LlamaForCausalLM(config).to(dtype)  # type: ignore[arg-type]  # stub gap
    model.config.dtype = dtype
    return model


def _layer_index(key: str) -> int | None:
    """The layer number of a ``model.layers.N.…`` state-dict key, else ``None``."""
    parts = key.split(".")
    if len(parts) > 2 and parts[:2] == ["model", "layers"]:
        return int(parts[2])
    return None


def truncated_state(target: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """The target's state dict cut to its first ``layers`` decoder layers (embeddings, final
    norm and head kept): an early exit of the target after ``layers`` layers.

    Raises:
        ValueError: ``layers`` is not below the target's layer count.
    """
    present = {i for k in target if (i := _layer_index(k)) is not None}
    if layers >= len(present):
        raise ValueError(f"a truncated copy needs fewer than the target's {len(present)} layers")
    return {k: v.clone() for k, v in target.items() if (i := _layer_index(k)) is None or i < layers}


def echo_state(target: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """A draft that proposes the last token again, from the target's state dict.

    The target's first ``layers`` layers with their output projections (``o_proj``,
    ``down_proj``) zeroed, so each block adds exactly nothing to the residual stream and the
    last hidden state is the token's embedding e_t; a final norm of ones (RMSNorm(e_t) =
    e_t / rms(e_t)); a head whose rows are the unit-normalised embeddings, so logit_j ∝
    cos(e_j, e_t), largest (= 1) at j = t for distinct embeddings.
    """
    import torch

    state = truncated_state(target, layers)
    for key, value in state.items():
        if key.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            state[key] = torch.zeros_like(value)
    state["model.norm.weight"] = torch.ones_like(state["model.norm.weight"])
    embed = state["model.embed_tokens.weight"].float()
    head = embed / embed.norm(dim=1, keepdim=True)
    state["lm_head.weight"] = head.to(state["lm_head.weight"].dtype)
    return state


def build_draft(out: Path, variant: ModelVariant, draft: DraftSpec, target_dir: Path) -> None:
    """Build ``draft`` for ``variant`` into ``out`` (atomically); ``truncated`` and ``echo``
    read the target's weights from ``target_dir`` (built already)."""
    import torch
    from transformers import LlamaForCausalLM

    architecture = variant.architecture(draft.layers)
    if draft.kind == "random":
        model = _random_model(variant, DRAFT_SEED, architecture)
    else:
        dtype = getattr(torch, variant.dtype)
        target = LlamaForCausalLM.from_pretrained(target_dir, dtype=dtype)
        cut = truncated_state if draft.kind == "truncated" else echo_state
        state = cut(target.state_dict(), draft.layers)
        model = LlamaForCausalLM(_llama_config(architecture)).to(dtype)  # type: ignore[arg-type]
        model.load_state_dict(state, strict=True)
        model.config.dtype = dtype
    facts = {
        "name": f"{MODEL_NAME}-draft",
        "variant": variant.name,
        "dtype": variant.dtype,
        "draft": {"kind": draft.kind, "layers": draft.layers},
        "draft_build_version": DRAFT_BUILD_VERSION,
        "derived_from": None if draft.kind == "random" else target_dir.name,
        "seed": DRAFT_SEED if draft.kind == "random" else None,
        "architecture": architecture,
        "kv_bytes_per_token": draft.layers * variant.kv_bytes_per_layer_token,
    }
    _save(out, model, facts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the embedded default model.")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="bf16")
    parser.add_argument("--draft", choices=DRAFT_KINDS, default=None, help="Build a draft.")
    parser.add_argument("--draft-layers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    variant = VARIANTS[args.variant]
    if args.draft is None:
        out = args.out or model_dir(args.variant)
        build(out, variant)
    else:
        draft = DraftSpec(args.draft, args.draft_layers)
        out = args.out or draft_dir(draft, args.variant)
        build_draft(out, variant, draft, model_dir(args.variant))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
