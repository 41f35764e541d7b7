"""metrics.parse and metrics.names on the recorded vLLM 0.32.0 page and on older names."""

from __future__ import annotations

from pathlib import Path

import pytest

from metrics.names import CANONICAL_BY_SAMPLE, METRICS, metric_type
from metrics.parse import filter_families, parse_samples
from metrics.samples import Sample

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"
M = (("model_name", "m"),)


@pytest.fixture(scope="module")
def page_samples() -> list[Sample]:
    return parse_samples(FIXTURE.read_text(), 123)


def test_canonical_names_found_on_the_real_page(page_samples: list[Sample]) -> None:
    names = {s.name for s in page_samples}
    assert names == {
        "num_requests_running",
        "num_requests_waiting",
        "kv_cache_usage_perc",
        "num_preemptions",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "prompt_tokens",
        "generation_tokens",
        "request_success",
    }
    assert all(s.t_ns == 123 for s in page_samples)


def test_request_success_keeps_finished_reason_labels(page_samples: list[Sample]) -> None:
    reasons = [
        dict(s.labels)["finished_reason"] for s in page_samples if s.name == "request_success"
    ]
    assert reasons == ["stop", "length", "abort", "error", "repetition"]


def test_engine_label_is_dropped_and_labels_sorted(page_samples: list[Sample]) -> None:
    assert all("engine" not in dict(s.labels) for s in page_samples)
    running = [s for s in page_samples if s.name == "num_requests_running"]
    assert running == [Sample(123, "num_requests_running", M, 0.0)]
    success = next(s for s in page_samples if s.name == "request_success")
    assert success.labels == (("finished_reason", "stop"), ("model_name", "m"))


def test_created_samples_are_excluded(page_samples: list[Sample]) -> None:
    # The page has one num_preemptions_total and one num_preemptions_created (≈1.796e9, a
    # Unix time); only the counter itself may come through.
    assert [s for s in page_samples if s.name == "num_preemptions"] == [
        Sample(123, "num_preemptions", M, 0.0)
    ]
    assert all(s.value < 1e6 for s in page_samples)
    assert "_created" not in filter_families(FIXTURE.read_text())


def test_filter_keeps_only_recorded_families() -> None:
    kept = filter_families(FIXTURE.read_text()).splitlines()
    assert "# TYPE vllm:num_requests_running gauge" in kept
    assert not any("cache_config_info" in line for line in kept)
    assert not any("external_prefix_cache" in line for line in kept)


def test_old_gpu_cache_usage_name_maps_to_kv_cache_usage() -> None:
    text = (
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        "# TYPE vllm:gpu_prefix_cache_hits counter\n"
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 512.0\n'
    )
    assert parse_samples(text, 9) == [
        Sample(9, "kv_cache_usage_perc", M, 0.25),
        Sample(9, "prefix_cache_hits", M, 512.0),
    ]


def test_counter_values_are_read_as_floats() -> None:
    text = (
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{model_name="m"} 17\n'
        'vllm:num_preemptions_created{model_name="m"} 1.7e9\n'
    )
    assert parse_samples(text, 1) == [Sample(1, "num_preemptions", M, 17.0)]


def test_invalid_exposition_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_samples('vllm:num_requests_running{model_name="m"} not-a-number\n', 1)


def test_every_raw_name_maps_back_to_its_canonical_name() -> None:
    for canonical, (kind, raws) in METRICS.items():
        assert metric_type(canonical) == kind
        assert all(CANONICAL_BY_SAMPLE[raw] == canonical for raw in raws)
    assert metric_type("kv_cache_usage_perc") == "gauge"
    assert metric_type("num_preemptions") == "counter"
    with pytest.raises(KeyError):
        metric_type("gpu_cache_usage_perc")
