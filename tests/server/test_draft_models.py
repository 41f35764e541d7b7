"""Embedded draft models: geometry, KV capacity with a draft, the vLLM command line, and the
weight transforms that derive truncated and echo drafts from the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from server.config import EmbeddedDraft, ServerConfig
from server.embedded_model import draft_dir, echo_state, truncated_state
from server.model_variant import VARIANTS, DraftSpec

GiB = 2**30


def test_draft_spec_names_and_bounds() -> None:
    assert DraftSpec("random", 2).name == "random-2l"
    with pytest.raises(ValueError, match="expected one of random, truncated, echo"):
        DraftSpec("medusa", 2)
    for layers in (0, 28):  # at least one layer, fewer than the target's 28
        with pytest.raises(ValueError, match="expected 1 to 27"):
            DraftSpec("echo", layers)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_draft_takes_kv_space_the_same_way_in_both_variants(variant: str) -> None:
    model = VARIANTS[variant]
    # Per layer and token: bf16 4 KV heads × 128 × 2 × 2 B = fp32 2 × 128 × 2 × 4 B = 2,048 B.
    assert model.kv_bytes_per_layer_token == 2_048
    # 1 GiB with a 2-layer draft: 2^30 // (128 × 30 × 2,048) = 136 blocks → 17,408 tokens
    # (seen on vLLM 0.32.0); without a draft 146 blocks → 18,688.
    assert model.capacity_tokens(GiB, draft_layers=2) == 17_408
    assert model.capacity_tokens(GiB) == 18_688
    assert model.architecture(2)["num_hidden_layers"] == 2


def test_server_config_with_an_embedded_draft() -> None:
    config = ServerConfig(model_variant="fp32", draft=EmbeddedDraft(kind="echo"))
    assert config.kv_bytes_per_token() == 57_344 + 2 * 2_048
    argv = config.command("python", "/m", 1, "/drafts/echo")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "/drafts/echo", "num_speculative_tokens": 3}
    # Before the draft is built: the directory it will be built into, for this variant.
    argv = config.command("python", "/m", 1)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == str(draft_dir(DraftSpec("echo", 2), "fp32"))


def test_an_embedded_draft_needs_the_embedded_model_and_no_other_speculation() -> None:
    with pytest.raises(ValidationError, match="embedded model's tokens"):
        ServerConfig(model="/models/other", draft=EmbeddedDraft(kind="random"))
    with pytest.raises(ValidationError, match="not both"):
        ServerConfig(draft=EmbeddedDraft(kind="random"), speculative_config={"method": "ngram"})
    with pytest.raises(ValidationError):
        EmbeddedDraft(kind="random", layers=28)


def test_draft_directories_carry_target_build_kind_layers_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVING_TESTBED_CACHE", str(tmp_path))
    assert draft_dir(DraftSpec("echo", 2), "fp32") == (
        tmp_path / "models" / "testbed-llama-7bkv-fp32-v2-draft-echo-2l-d1"
    )
    assert draft_dir(DraftSpec("random", 3), "bf16").name == (
        "testbed-llama-7bkv-bf16-v2-draft-random-3l-d1"
    )


def _tiny_target(layers: int = 3, vocab: int = 64, hidden: int = 16) -> dict[str, torch.Tensor]:
    """A Llama state dict with ``layers`` layers (key names as transformers saves them)."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    state = {
        "model.embed_tokens.weight": rand(vocab, hidden),
        "model.norm.weight": torch.rand(hidden, generator=gen) + 0.5,
        "lm_head.weight": rand(vocab, hidden),
    }
    for i in range(layers):
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            state[f"model.layers.{i}.self_attn.{name}.weight"] = rand(hidden, hidden)
        for name in ("gate_proj", "up_proj"):
            state[f"model.layers.{i}.mlp.{name}.weight"] = rand(2 * hidden, hidden)
        state[f"model.layers.{i}.mlp.down_proj.weight"] = rand(hidden, 2 * hidden)
        state[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(hidden)
        state[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(hidden)
    return state


def test_truncated_copy_keeps_the_first_layers_embeddings_norm_and_head() -> None:
    target = _tiny_target(layers=3)
    draft = truncated_state(target, 1)
    assert {k for k in draft if ".layers." in k} == {
        k for k in target if k.startswith("model.layers.0.")
    }
    assert all(torch.equal(draft[k], target[k]) for k in draft)
    assert set(target) - set(draft) == {
        k for k in target if k.startswith(("model.layers.1.", "model.layers.2."))
    }
    with pytest.raises(ValueError, match="fewer than the target's 3 layers"):
        truncated_state(target, 3)


def test_echo_draft_predicts_the_token_it_was_given_for_every_token() -> None:
    target = _tiny_target(layers=3, vocab=64)
    draft = echo_state(target, 2)
    for i in range(2):  # blocks add nothing to the residual stream
        assert not draft[f"model.layers.{i}.self_attn.o_proj.weight"].any()
        assert not draft[f"model.layers.{i}.mlp.down_proj.weight"].any()
    assert torch.equal(draft["model.norm.weight"], torch.ones(16))
    # The last hidden state is the embedding e_t; RMSNorm with unit weights; the head's rows
    # are unit embeddings, so logit_j ∝ cos(e_j, e_t): largest at j = t, for every t.
    embed = draft["model.embed_tokens.weight"]
    hidden = embed / embed.pow(2).mean(dim=1, keepdim=True).sqrt()
    logits = hidden @ draft["lm_head.weight"].T
    assert torch.equal(logits.argmax(dim=1), torch.arange(64))
    assert torch.equal(embed, target["model.embed_tokens.weight"])  # the target's embeddings
