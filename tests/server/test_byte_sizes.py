"""server.sizes: byte sizes on the command line (IEC powers of two, SI powers of ten)."""

from __future__ import annotations

import pytest

from server.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1GiB", 2**30),
        ("512MiB", 512 * 2**20),
        ("2GB", 2_000_000_000),
        ("1.5GiB", 1_610_612_736),  # 1.5 × 1,073,741,824
        ("100B", 100),
        ("4KiB", 4096),
        ("1TiB", 2**40),
        ("250MB", 250_000_000),
        (" 8 GiB ", 8 * 2**30),
    ],
)
def test_good_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4.1MB", 4_100_000),
        ("1.1KB", 1_100),
        ("2.3GB", 2_300_000_000),
    ],
)
def test_decimal_si_sizes_that_are_whole_bytes(text: str, expected: int) -> None:
    # 4.1 MB is exactly 4,100,000 bytes; a float product (4.1 × 10^6 = 4099999.9999999995)
    # must not turn it into "not a whole number of bytes".
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a number and a unit"),
        ("1", "expected a number and a unit"),
        ("GiB", "expected a number and a unit"),
        ("-1GiB", "expected a number and a unit"),
        ("1gb", "unknown unit 'gb'"),
        ("1 Gib", "unknown unit 'Gib'"),
        ("1Mb", "unknown unit 'Mb'"),
        ("0GiB", "must be positive"),
        ("1.5B", "not a whole number of bytes"),
    ],
)
def test_bad_sizes_are_rejected_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_size(text)
    assert message in str(info.value)
    assert repr(text) in str(info.value)


def test_error_lists_the_accepted_units() -> None:
    with pytest.raises(ValueError) as info:
        parse_size("3 bytes")
    assert "accepted units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB" in str(info.value)


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (2**30, "1GiB"),
        (4 * 2**30, "4GiB"),
        (1_610_612_736, "1536MiB"),  # 1.5 GiB is not whole GiB, but is 1536 MiB
        (2**40, "1TiB"),
        (4096, "4KiB"),
        (2_000_000_000, "1953125KiB"),  # 2e9 = 1,953,125 × 1024: exact KiB wins
        (1_500_000_001, "1.40GiB"),  # no exact unit: 1,500,000,001 / 2^30 = 1.3970
        (1500, "1.46KiB"),
        (100, "100B"),
    ],
)
def test_format_size(n_bytes: int, text: str) -> None:
    assert format_size(n_bytes) == text


@pytest.mark.parametrize("n_bytes", [2**30, 3 * 2**20, 5 * 2**40, 7 * 2**10])
def test_exact_iec_formats_parse_back(n_bytes: int) -> None:
    assert parse_size(format_size(n_bytes)) == n_bytes
