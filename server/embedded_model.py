"""The embedded default model: a random-weight Llama with the KV geometry of a 7B-class model.

Outputs are gibberish; what matters is that vLLM's scheduling, caching, preemption and timings
are real and that a KV cache size in bytes holds the same number of tokens as on a 7B model:
28 layers × 4 KV heads × head_dim 128 × 2 (K and V) × 2 B (bfloat16) = 57,344 B per token,
so 1 GiB ≈ 18.7k tokens. Hidden size and MLP stay tiny so a CPU runs it quickly.

The model is built locally and reproducibly (seeded weights, tokenizer trained on seeded
generated text) into a cache directory on first use and reused afterwards. Building imports
torch and transformers, so it runs in a child process (``python -m server.embedded_model``)
to keep the load generator's process light.
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
from pathlib import Path
from typing import Any

MODEL_NAME = "testbed-llama-7bkv"
#: Bump when anything below changes: the cache directory name carries it.
BUILD_VERSION = 1
SEED = 1234

ARCHITECTURE: dict[str, Any] = {
    "vocab_size": 4096,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 28,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "max_position_embeddings": 4096,
}
KV_BYTES_PER_TOKEN = (
    ARCHITECTURE["num_hidden_layers"]
    * ARCHITECTURE["num_key_value_heads"]
    * ARCHITECTURE["head_dim"]
    * 2  # K and V
    * 2  # bfloat16
)

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def cache_root() -> Path:
    """Where built models live: ``$SERVING_TESTBED_CACHE`` or ``~/.cache/serving-testbed``."""
    root = os.environ.get("SERVING_TESTBED_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "serving-testbed"


def model_dir() -> Path:
    """Where the embedded model lives once built (the path is versioned by ``BUILD_VERSION``)."""
    return cache_root() / "models" / f"{MODEL_NAME}-v{BUILD_VERSION}"


def ensure_embedded_model(python: str = sys.executable) -> Path:
    """Return the embedded model's directory, building it in a child process if it is missing.

    A file lock makes concurrent callers (parallel test workers, two CLIs) build it once.

    Raises:
        RuntimeError: the build failed; the message carries the builder's output.
    """
    target = model_dir()
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        proc = subprocess.run(
            [python, "-m", "server.embedded_model", "--out", str(target)],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise RuntimeError(f"building the embedded model failed:\n{tail}")
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


def build(out: Path) -> None:
    """Build the model and tokenizer into ``out`` (atomically: a temp dir renamed at the end)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    special = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=ARCHITECTURE["vocab_size"],
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = _CHAT_TEMPLATE

    config = LlamaConfig(
        **ARCHITECTURE,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[arg-type]  # stub gap
    model.config.dtype = torch.bfloat16

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        fast.save_pretrained(tmp)
        (tmp / "testbed_model.json").write_text(
            json.dumps(
                {
                    "name": MODEL_NAME,
                    "build_version": BUILD_VERSION,
                    "seed": SEED,
                    "architecture": ARCHITECTURE,
                    "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
                },
                indent=2,
            )
        )
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the embedded default model.")
    parser.add_argument("--out", type=Path, default=model_dir())
    args = parser.parse_args(argv)
    build(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
