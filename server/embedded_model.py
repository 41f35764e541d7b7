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

from server.model_variant import COMMON_ARCHITECTURE, KV_BYTES_PER_TOKEN, VARIANTS, ModelVariant

__all__ = ["KV_BYTES_PER_TOKEN", "cache_root", "ensure_embedded_model", "model_dir"]

MODEL_NAME = "testbed-llama-7bkv"
#: Bump when anything below changes: the cache directory names carry it.
#: v2: two variants (bf16, fp32) in separate directories, one shared tokenizer.
BUILD_VERSION = 2
SEED = 1234

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


def ensure_embedded_model(variant: str, python: str = sys.executable) -> Path:
    """Return the directory of the embedded model's ``variant``, building it if it is missing.

    A file lock makes concurrent callers (parallel test workers, two CLIs) build it once.

    Raises:
        KeyError: unknown ``variant``.
        RuntimeError: the build failed; the message carries the builder's output.
    """
    target = model_dir(variant)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        proc = subprocess.run(
            [python, "-m", "server.embedded_model", "--variant", variant, "--out", str(target)],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise RuntimeError(f"building the embedded model ({variant}) failed:\n{tail}")
    return target


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


def build(out: Path, variant: ModelVariant) -> None:
    """Build ``variant`` into ``out`` (atomically), with a copy of the shared tokenizer.

    The tokenizer is built first if it is missing (callers hold the build lock).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer_dir()
    if not (tokenizer / "tokenizer.json").exists():
        build_tokenizer(tokenizer)
    special = json.loads((tokenizer / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in special}
    torch.manual_seed(SEED)
    dtype = getattr(torch, variant.dtype)
    config = LlamaConfig(
        **variant.architecture(),
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(dtype)  # type: ignore[arg-type]  # stub gap
    model.config.dtype = dtype

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        for item in tokenizer.iterdir():
            shutil.copy2(item, tmp / item.name)
        facts = {
            "name": MODEL_NAME,
            "variant": variant.name,
            "dtype": variant.dtype,
            "build_version": BUILD_VERSION,
            "seed": SEED,
            "architecture": variant.architecture(),
            "kv_bytes_per_token": variant.kv_bytes_per_token,
        }
        (tmp / "testbed_model.json").write_text(json.dumps(facts, indent=2))

    _atomic_dir(out, fill)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the embedded default model.")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="bf16")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or model_dir(args.variant)
    build(out, VARIANTS[args.variant])
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
