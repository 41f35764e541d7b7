"""Parsing of byte sizes given on the command line (``1GiB``, ``512MiB``, ``2GB``)."""

from __future__ import annotations

import re
from fractions import Fraction

_UNITS: dict[str, int] = {
    "B": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
#: Largest size accepted: 1 PiB (2^50 bytes). Every size typed here is a KV cache, and 1 PiB
#: is hundreds of times the memory of the largest single server; a typo of a few more zeros
#: (``1e30TiB``) is refused before any server is asked for it.
MAX_SIZE_BYTES = 2**50
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*$", re.ASCII)


def parse_size(text: str) -> int:
    """Return the number of bytes in a size such as ``1GiB`` (2^30) or ``2GB`` (2·10^9).

    IEC units (KiB, MiB, GiB, TiB) are powers of two, SI units (KB, MB, GB, TB) powers of ten;
    a bare ``B`` is bytes. Units are case-sensitive because ``Mb`` (megabits) is not ``MB``.

    Raises:
        ValueError: empty text, no unit, an unknown unit, a non-positive size, a size that
            is not a whole number of bytes, or one above :data:`MAX_SIZE_BYTES`. The message
            names the accepted units.
    """
    match = _SIZE_RE.match(text)
    accepted = ", ".join(_UNITS)
    if not match:
        raise ValueError(
            f"invalid size {text!r}: expected a number and a unit ({accepted}), e.g. 1GiB"
        )
    number, unit = match.groups()
    if unit not in _UNITS:
        raise ValueError(
            f"invalid size {text!r}: unknown unit {unit!r}; accepted units: {accepted}"
        )
    value = Fraction(number) * _UNITS[unit]  # exact: 4.1MB is 4,100,000 B, not 4099999.99…
    if value <= 0:
        raise ValueError(f"invalid size {text!r}: must be positive")
    if value.denominator != 1:
        raise ValueError(f"invalid size {text!r}: not a whole number of bytes")
    if value > MAX_SIZE_BYTES:
        raise ValueError(f"invalid size {text!r}: larger than the limit of 1PiB (2^50 bytes)")
    return int(value)


def format_size(n_bytes: int) -> str:
    """Render bytes in the largest IEC unit dividing them exactly (``1073741824`` → ``1GiB``)."""
    if n_bytes == 0:
        return "0B"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = _UNITS[unit]
        if n_bytes % factor == 0:
            return f"{n_bytes // factor}{unit}"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = _UNITS[unit]
        if n_bytes >= factor:
            return f"{n_bytes / factor:.2f}{unit}"
    return f"{n_bytes}B"
