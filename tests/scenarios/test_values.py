"""scenarios.values: the one parser of typed numbers (rates, durations, sizes, SLOs, lists),
their rules (finite, in range, no repeats) and labels that never collide."""

from __future__ import annotations

import pytest

from scenarios.values import (
    exact_label,
    list_items,
    parse_concurrencies,
    parse_duration,
    parse_percentiles,
    parse_rates,
    parse_sizes,
    parse_slo,
    parse_speedups,
)
from tests.support.timing import times_a_linear_scan


def test_durations_take_ms_s_and_minutes_in_the_unit_asked() -> None:
    assert parse_duration("40s") == 40.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("7.5") == 7.5  # bare: seconds
    # In milliseconds, bare numbers are milliseconds (a trace's clock) and 960 s is exact.
    assert parse_duration("960s", unit="ms") == 960_000.0
    assert parse_duration("90000", unit="ms") == 90_000.0
    assert parse_duration("0", unit="ms", zero_ok=True) == 0.0


@pytest.mark.parametrize("text", ["", "5h", "s", "nan", "inf", "1e3s", "9" * 400, "--1s"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration; e\.g\. 40s, 500ms, 2m$"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "zero_ok", "message"),
    [
        ("0s", False, "'0s' is zero: a duration must be > 0"),
        ("0ms", False, "'0ms' is zero: a duration must be > 0"),
        ("-1s", False, "'-1s' is negative: a duration must be > 0"),
        ("- 5 ms", True, "'- 5 ms' is negative: a duration must be ≥ 0"),
    ],
)
def test_a_duration_that_is_zero_or_negative_is_called_so(
    text: str, zero_ok: bool, message: str
) -> None:
    # '0ms' is a duration: the message once said it was not one, which sent users hunting
    # for a typo in the unit.
    with pytest.raises(ValueError) as caught:
        parse_duration(text, zero_ok=zero_ok)
    assert str(caught.value) == message


def test_a_duration_is_parsed_in_linear_time() -> None:
    # Spaces around an optional unit once backtracked over each other: 40k spaces then a
    # stray letter cost O(n²). Now a few linear scans (the ratio is in tests.support.timing).
    assert parse_duration(" 2 m \n") == 120.0  # spaces around and between are allowed
    text = "1" + " " * 100_000 + "x"
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)
    assert times_a_linear_scan(parse_duration, text) < 25


def test_a_duration_above_one_day_is_refused() -> None:
    # 1441 min = 86,460 s > 86,400 s.
    with pytest.raises(ValueError, match=r"^'1441m' is longer than 86400 s \(one day\)$"):
        parse_duration("1441m")
    assert parse_duration("1440m") == 86_400.0


def test_rates_keep_their_order_and_refuse_what_cannot_be_a_rate() -> None:
    assert parse_rates("4, 2,8.5") == [4.0, 2.0, 8.5]
    for text, why in (
        ("nan", "rate 'nan' is not a finite number"),
        ("1e999", "rate '1e999' is not a finite number"),
        ("x", "rate 'x' is not a number"),
        ("-1", "rate -1 must be > 0 req/s"),
        ("1001", "rate 1001 must be ≤ 1000 req/s (above it the client's send loop, not the "
         "rate, decides when requests leave)"),
        ("2,2.0", "rate 2 is given twice"),
        (" , ", "no rate given; e.g. 2,4,8"),
    ):  # fmt: skip
        with pytest.raises(ValueError) as info:
            parse_rates(text)
        assert str(info.value) == why


def test_concurrencies_speedups_sizes_and_percentiles() -> None:
    assert parse_concurrencies("16,1") == [16, 1]
    with pytest.raises(ValueError, match=r"^concurrency '2\.5' is not an integer$"):
        parse_concurrencies("2.5")
    assert parse_speedups("2,0.5,1") == [0.5, 1.0, 2.0]  # increasing: phases run in order
    with pytest.raises(ValueError, match=r"^speedup 0 must be > 0$"):
        parse_speedups("0")
    assert parse_sizes("1GiB,4GiB") == [2**30, 2**32]
    with pytest.raises(ValueError, match=r"^cache size 1024MiB is given twice \(1073741824"):
        parse_sizes("1GiB, 1024MiB")
    assert parse_percentiles("50,99.9") == [50.0, 99.9]
    with pytest.raises(ValueError, match=r"^percentile 0 must be > 0$"):
        parse_percentiles("0")


def test_slo_text_gives_limits_in_ms() -> None:
    assert parse_slo("ttft=200ms, tpot=50ms,e2el=5s") == {
        "ttft": 200.0, "tpot": 50.0, "e2el": 5000.0,
    }  # fmt: skip
    with pytest.raises(ValueError, match="METRIC one of ttft, tpot, e2el"):
        parse_slo("itl=5ms")
    with pytest.raises(ValueError, match="given twice"):
        parse_slo("ttft=1s,ttft=2s")
    with pytest.raises(ValueError, match="SLO ttft: 'nan' is not a limit"):
        parse_slo("ttft=nan")


def test_labels_read_back_as_the_number_so_two_numbers_never_share_one() -> None:
    assert exact_label(0.1) == "0.1"
    assert exact_label(0.1000001) == "0.1000001"  # ":g" alone gives "0.1" for both
    assert exact_label(2.0) == "2"
    assert exact_label(1e-9) == "1e-09"
    assert exact_label(0.5, ".2f") == "0.50"  # the format kept where it is exact
    assert exact_label(0.251, ".2f") == "0.251"
    values = [0.1, 0.1000001, 0.10000001, 1 / 3, 0.3333333]
    assert len({exact_label(v) for v in values}) == len(values)


@pytest.mark.parametrize("text", ["1,,2", "1,", ",1", "1, ,2"])
def test_an_empty_item_between_commas_is_refused_in_every_list(text: str) -> None:
    # "--rate 1,,2" ran phases r1 and r2: the value lost between the commas was dropped
    for parse in (parse_rates, parse_concurrencies, parse_percentiles):
        with pytest.raises(ValueError, match="has an empty item between commas"):
            parse(text)
    with pytest.raises(ValueError, match="has an empty item between commas"):
        parse_sizes(text.replace("1", "1GiB").replace("2", "2GiB"))
    with pytest.raises(ValueError, match="has an empty item between commas"):
        parse_slo(text.replace("1", "ttft=1s").replace("2", "tpot=2ms"))


def test_list_items_strips_and_a_blank_value_has_none() -> None:
    assert list_items(" 1 , 2 ", "rate") == ["1", "2"]
    assert list_items("  ", "rate") == list_items(" , ", "rate") == []
