"""server.model_variant: both variants hold the same tokens per byte; ``auto`` picks by CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios.registry import SCENARIOS
from server.capacity import KVCapacity
from server.config import ServerConfig
from server.model_variant import (
    KV_BYTES_PER_TOKEN,
    VARIANTS,
    choose_variant,
    read_cpu_flags,
)

GiB = 2**30

#: Flags of the 2-core EPYC the project runs on (family 25 model 17): AVX-512 with BF16.
EPYC_AVX512_BF16 = frozenset(
    ["fpu", "sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"]
)
#: Flags of an AVX2-only EPYC (no AVX-512, no AMX).
EPYC_AVX2_ONLY = frozenset(["fpu", "sse2", "avx", "avx2", "fma", "f16c"])
#: A Sapphire Rapids Xeon: AMX and AVX-512 BF16.
XEON_AMX = EPYC_AVX512_BF16 | {"amx_bf16", "amx_tile", "amx_int8"}


def test_both_variants_store_57344_bytes_of_kv_per_token() -> None:
    # bf16: 28 layers × 4 KV heads × 128 × 2 (K, V) × 2 B = 57,344
    # fp32: 28 layers × 2 KV heads × 128 × 2 (K, V) × 4 B = 57,344
    assert VARIANTS["bf16"].kv_bytes_per_token == 57_344
    assert VARIANTS["fp32"].kv_bytes_per_token == 57_344
    assert KV_BYTES_PER_TOKEN == 57_344


def test_variants_differ_only_in_dtype_and_heads() -> None:
    bf16, fp32 = VARIANTS["bf16"].architecture(), VARIANTS["fp32"].architecture()
    assert (bf16["num_attention_heads"], bf16["num_key_value_heads"]) == (4, 4)
    assert (fp32["num_attention_heads"], fp32["num_key_value_heads"]) == (2, 2)
    assert (VARIANTS["bf16"].dtype, VARIANTS["fp32"].dtype) == ("bfloat16", "float32")
    heads = ("num_attention_heads", "num_key_value_heads")
    assert {k: v for k, v in bf16.items() if k not in heads} == {
        k: v for k, v in fp32.items() if k not in heads
    }
    assert (bf16["num_hidden_layers"], bf16["head_dim"], bf16["hidden_size"]) == (28, 128, 128)
    assert bf16["intermediate_size"] == 256


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    ("cache_bytes", "tokens"),
    [
        # floor(bytes / (128 × 57,344 = 7,340,032 B per block)) blocks × 128 tokens:
        (1 * GiB, 18_688),  # 1,073,741,824 / 7,340,032 = 146.3 → 146 blocks (seen on vLLM)
        (4 * GiB, 74_880),  # 4,294,967,296 / 7,340,032 = 585.1 → 585 blocks (seen on vLLM)
        (5 * GiB, 93_568),  # 5,368,709,120 / 7,340,032 = 731.4 → 731 blocks (seen on vLLM)
        (16 * 2**20, 256),  # 16,777,216 / 7,340,032 = 2.3 → 2 blocks (too small to start)
    ],
)
def test_capacity_in_tokens_is_the_same_for_both_variants(
    variant: str, cache_bytes: int, tokens: int
) -> None:
    assert VARIANTS[variant].capacity_tokens(cache_bytes) == tokens


#: Parameters a scenario requires (no default).
_SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"
_REQUIRED: dict[str, dict[str, object]] = {"trace-replay": {"trace": str(_SAMPLE)}}


def _cache_sizes_planned(variant: str) -> dict[str, set[int]]:
    """Every server cache size each built-in scenario plans with its defaults and ``variant``,
    planned against the capacity that variant gives (as the real run plans from the server)."""
    sizes: dict[str, set[int]] = {}
    for name, scenario in SCENARIOS.items():
        params = scenario.Params.model_validate(
            {"model_variant": variant, **_REQUIRED.get(name, {})}
        )
        sizing = scenario.sizing_case(params).server
        assert sizing is not None
        model = VARIANTS[variant]
        tokens = model.capacity_tokens(sizing.kv_cache_bytes)
        capacity = KVCapacity(tokens, 128, tokens // 128, sizing.kv_cache_bytes, "nominal")
        plan = scenario.plan(params, capacity)
        servers = [case.server for case in plan.cases if case.server is not None]
        assert all(s.model_variant == variant for s in servers)
        assert all(s.effective_dtype() == model.dtype for s in servers)
        sizes[name] = {s.kv_cache_bytes for s in servers}
    return sizes


#: Hand-derived capacities (above) of the cache sizes the built-in scenarios plan.
HAND_CAPACITY_TOKENS = {1 * GiB: 18_688, 4 * GiB: 74_880, 5 * GiB: 93_568}


#: Cache sizes each scenario plans with its defaults (a new scenario adds its own line).
HAND_SCENARIOS = {
    "prefix-eviction": {1 * GiB, 5 * GiB},
    "kv-preemption": {1 * GiB, 4 * GiB},
    "disconnect-abort": {1 * GiB},
    "breaker": {1 * GiB},
    "spec-decode": {1 * GiB},
    "trace-replay": {1 * GiB},
}


def test_every_scenario_plans_the_same_cache_sizes_and_capacities_with_either_variant() -> None:
    bf16, fp32 = _cache_sizes_planned("bf16"), _cache_sizes_planned("fp32")
    assert bf16 == fp32
    # prefix-eviction's control: 561 blocks needed (4 × 8 + 2 × 48 × 1 + 48 × 9 + 1), × 128
    # tokens × 57,456 B (1 GiB / 18,688) × 1.1 = 4.23 GiB, rounded up to 5 GiB.
    assert {name: bf16[name] for name in HAND_SCENARIOS} == HAND_SCENARIOS
    for size in set().union(*bf16.values()):
        tokens = VARIANTS["bf16"].capacity_tokens(size)
        assert VARIANTS["fp32"].capacity_tokens(size) == tokens
        assert HAND_CAPACITY_TOKENS.get(size, tokens) == tokens


def test_server_config_passes_the_variant_dtype_and_kv_size() -> None:
    fp32 = ServerConfig(model_variant="fp32")
    assert fp32.effective_dtype() == "float32"
    assert fp32.kv_bytes_per_token() == 57_344
    argv = fp32.command("python", "m", 1)
    assert argv[argv.index("--dtype") + 1] == "float32"
    custom = ServerConfig(model="/models/other", model_variant="fp32")
    assert custom.variant_decision() is None and custom.kv_bytes_per_token() is None
    assert custom.effective_dtype() == "bfloat16"  # as before variants existed
    assert ServerConfig(model_variant="fp32", dtype="float16").effective_dtype() == "float16"


@pytest.mark.parametrize(
    ("flags", "variant"),
    [
        # AVX2 only: bf16 prefill 4.2 s vs fp32 0.65 s; AVX-512 BF16: 0.59 vs 0.38 s.
        (EPYC_AVX2_ONLY, "fp32"),
        (EPYC_AVX512_BF16, "fp32"),
        (XEON_AMX, "bf16"),  # vLLM's AMX kernels are bfloat16-only
        (None, "fp32"),  # flags unknown (no /proc/cpuinfo)
    ],
)
def test_auto_picks_bf16_only_where_vllm_has_amx_kernels_for_it(
    flags: frozenset[str] | None, variant: str
) -> None:
    decision = choose_variant("auto", flags)
    assert decision.variant == variant
    assert decision.reason.startswith("auto: ")


@pytest.mark.parametrize("choice", ["bf16", "fp32"])
def test_an_explicit_choice_wins_on_any_cpu(choice: str) -> None:
    for flags in (EPYC_AVX512_BF16, EPYC_AVX2_ONLY, None):
        decision = choose_variant(choice, flags)
        assert decision.as_dict() == {
            "variant": choice,
            "reason": f"{choice} chosen explicitly (--model-variant {choice})",
        }


def test_unknown_choice_is_rejected_with_the_choices() -> None:
    with pytest.raises(ValueError, match="expected one of auto, bf16, fp32"):
        choose_variant("fp16", EPYC_AVX512_BF16)


def test_cpu_flags_are_read_from_the_first_processor(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    assert read_cpu_flags(cpuinfo) == frozenset({"fpu", "avx2", "avx512_bf16"})
    assert read_cpu_flags(tmp_path / "absent") is None


def test_server_description_carries_the_variant_and_reason() -> None:
    from server.manager import RunningServer

    variant = {"variant": "fp32", "reason": "fp32 chosen explicitly (--model-variant fp32)"}
    server = RunningServer("http://127.0.0.1:1", "testbed", None, "0.32.0", model_variant=variant)
    assert server.describe()["model_variant"] == variant
