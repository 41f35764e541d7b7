"""``loadgen trace``: offline commands on trace files (no server). ``trace stats`` prints a
trace's arrivals, lengths and sessions, and its predicted prefix-cache hit rate against cache
size, as a table, a PNG plot and (``--json``) one JSON object.

Heavy modules (numpy via the trace modules, matplotlib) are imported inside the command so
``--help`` stays quick.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.output_paths import write_error_exit
from loadgen.cli.trace_fleet import (
    FleetArgs,
    check_fleet_args,
    fleet_json,
    fleet_options,
    fleet_text,
    given_flags,
)
from loadgen.runformat.atomic import RunWriteError, write_with
from scenarios.common import MAX_CACHE_TOKENS, MAX_KV_BYTES_PER_TOKEN, MAX_TOKENS
from server.cli_options import FiniteFloat
from server.model_variant import CPU_BLOCK_SIZE, KV_BYTES_PER_TOKEN
from server.net.exit_codes import TraceExit
from server.net.json_text import dumps

if TYPE_CHECKING:
    from scenarios.trace_stats import FleetStats, HitCurve, TraceSummary
    from scenarios.traces import Trace

#: Shortest peak-rate window (s): one millisecond, the unit of a trace's timestamps; a
#: shorter one only divides a count by a tiny number (5e-324 s gives an infinite rate).
MIN_PEAK_WINDOW_S = 0.001
#: Longest window of the peak arrival rate (s): 365 days, the longest schedule a run takes
#: (``scenarios.schedule``); any wider window is the trace's mean rate.
MAX_PEAK_WINDOW_S = 365 * 86400.0
#: Where the plot goes unless ``--plot`` says otherwise (``runs/`` is the results root).
DEFAULT_PLOT_DIR = Path("runs") / "trace-stats"


class BadInput(click.ClickException):
    """Bad input: one line on stderr (``Error: …``), exit 2, nothing computed."""

    exit_code = TraceExit.BAD_INPUT


@click.group()
def trace() -> None:
    """Offline commands on trace files (Mooncake JSONL, sessions); no server."""


def _cache_tokens(
    cache: str | None, cache_tokens: str | None, block_tokens: int, kv_bytes_per_token: int
) -> tuple[list[int] | None, dict[int, str]]:
    """Sizes to sweep in tokens (``None`` = default sweep) and the user's label of each."""
    from scenarios.trace_stats import cache_tokens_for_bytes
    from scenarios.values import Range, list_items, parse_numbers, parse_sizes

    if cache and cache_tokens:
        raise BadInput("give --cache (bytes) or --cache-tokens, not both")
    labels: dict[int, str] = {}
    if cache:
        sizes = []
        try:
            n_bytes = parse_sizes(cache)
        except ValueError as exc:
            raise BadInput(f"--cache: {exc}") from None
        for part, size in zip(list_items(cache, "cache size"), n_bytes, strict=True):
            tokens = cache_tokens_for_bytes(size, kv_bytes_per_token, block_tokens)
            if tokens < 2 * block_tokens:
                raise BadInput(
                    f"--cache {part}: holds {tokens // block_tokens} blocks of {block_tokens} "
                    f"tokens × {kv_bytes_per_token:,} B/token; needs at least 2 (one is vLLM's "
                    "null block)"
                )
            if tokens in labels:
                raise BadInput(f"--cache {labels[tokens]} and {part} hold the same blocks")
            sizes.append(tokens)
            labels[tokens] = part
        return sizes, labels
    if cache_tokens:
        try:
            sane = Range(lo=2 * block_tokens, hi=MAX_CACHE_TOKENS,
                         why_lo=f"2 blocks of {block_tokens} tokens, one is vLLM's null block",
                         why_hi="2^40 tokens, a PiB of KV at 1 KiB a token")  # fmt: skip
            counts = parse_numbers(cache_tokens, "cache size", int, sane, example="16384,65536")
        except ValueError as exc:
            raise BadInput(f"--cache-tokens: {exc}") from None
        sizes = [n // block_tokens * block_tokens for n in counts]
        if len(set(sizes)) != len(sizes):
            raise BadInput(f"--cache-tokens {cache_tokens}: two sizes hold the same blocks of "
                           f"{block_tokens} tokens")  # fmt: skip
        return sizes, labels
    return None, labels


def _load(path: Path | None, trace_block_tokens: int, token_scale: str) -> Trace:
    """The trace at ``path`` (``None``: the built-in fleet workload, at its own block size),
    scaled."""
    from scenarios.fleet.workload import fleet_workload_trace
    from scenarios.trace_scale import parse_token_scale, scale_trace
    from scenarios.traces import TraceError, load_trace

    try:
        scale = parse_token_scale(token_scale)
        if path is None:
            trace = fleet_workload_trace()
        else:
            trace = load_trace(path, block_tokens=trace_block_tokens)
        return scale_trace(trace, scale) if scale != 1 else trace
    except (TraceError, ValueError) as exc:
        raise BadInput(str(exc)) from None


def _fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} req/s"


def _size(tokens: int, kv_bytes_per_token: int) -> str:
    """The bytes of ``tokens`` of KV, in the largest IEC unit that keeps the number ≥ 1."""
    n_bytes = tokens * kv_bytes_per_token
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= factor:
            return f"{n_bytes / factor:.2f} {unit}"
    return f"{n_bytes} B"


def _text(
    trace: Trace,
    summary: TraceSummary,
    curve: HitCurve,
    kv_bytes_per_token: int,
    labels: dict[int, str],
    plot: Path | None,
) -> str:
    s, c = summary, curve
    lines = [
        f"trace      {trace.path}",
        f"           {trace.kind}, sha256 {trace.sha256[:16]}…, trace block {trace.block_tokens} "
        f"tokens, token scale {trace.token_scale}",
        f"requests   {s.requests:,}"
        + (
            f" ({s.sessions:,} sessions, {s.session_turns:,} session turns)"
            if s.sessions
            else " (no sessions)"
        ),
        f"span       {s.span_s:,.1f} s (first to last timestamped arrival)",
        f"rate       mean {_fmt_rate(s.mean_rate_per_s)}; peak {_fmt_rate(s.peak_rate_per_s)} "
        f"(most arrivals in a {s.peak_window_s:g} s window)",
    ]
    for name, d in (("input", s.input_tokens), ("output", s.output_tokens)):
        lines.append(
            f"{name:<10} mean {d.mean:,.0f}  p50 {d.p50:,.0f}  p90 {d.p90:,.0f}  "
            f"p99 {d.p99:,.0f}  max {d.max:,} tokens"
        )
    lines += [
        "",
        f"prefix cache (vLLM rules, block {c.block_tokens} tokens, {kv_bytes_per_token:,} B of "
        "KV per token, requests one after another in file order)",
        f"  maximum hit rate (unbounded cache): {c.max_hit_rate:.2%}",
        f"  footprint: {c.footprint_tokens:,} tokens "
        f"({_size(c.footprint_tokens, kv_bytes_per_token)}): from there on nothing cached is "
        "evicted",
        "",
        f"  {'cache tokens':>14}  {'cache size':>11}  {'hit rate':>8}  {'of max':>7}  short",
    ]
    for p in c.points:
        label = labels.get(p.cache_tokens) or _size(p.cache_tokens, kv_bytes_per_token)
        of_max = f"{p.hit_rate / c.max_hit_rate:.1%}" if c.max_hit_rate else "n/a"
        lines.append(
            f"  {p.cache_tokens:>14,}  {label:>11}  {p.hit_rate:>8.2%}  {of_max:>7}  "
            f"{p.short_requests}"
        )
    lines.append("")
    target = f"{c.target_fraction:.0%} of the maximum ({c.target_fraction * c.max_hit_rate:.2%})"
    if c.target_cache_tokens is None:
        lines.append(f"  no swept cache reaches {target}; try larger sizes")
    else:
        lines.append(
            f"  smallest cache reaching {target}: {c.target_cache_tokens:,} tokens "
            f"({_size(c.target_cache_tokens, kv_bytes_per_token)})"
        )
    if any(p.short_requests for p in c.points):
        lines.append(
            "  short: requests that started when the cache could not hold them (the model lent "
            "them blocks; vLLM would queue or preempt)"
        )
    if plot is not None:
        lines.append(f"\nplot: {plot}")
    return "\n".join(lines)


def _plot(trace: Trace, curve: HitCurve, kv_bytes_per_token: int, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = [p.cache_tokens for p in curve.points]
    rates = [100 * p.hit_rate for p in curve.points]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(tokens, rates, marker="o", label="predicted hit rate")
    ax.axhline(100 * curve.max_hit_rate, linestyle="--", color="grey", label="maximum (unbounded)")
    target = 100 * curve.target_fraction * curve.max_hit_rate
    ax.axhline(target, linestyle=":", color="grey", label=f"{curve.target_fraction:.0%} of maximum")
    if curve.target_cache_tokens is not None:
        ax.axvline(
            curve.target_cache_tokens,
            linestyle=":",
            color="tab:red",
            label=f"smallest reaching it: {curve.target_cache_tokens:,} tokens",
        )
    ax.set_xscale("log")
    ax.set_xlabel(f"cache (tokens; × {kv_bytes_per_token:,} B = bytes)")
    ax.set_ylabel("prefix-cache hit rate (%)")
    ax.set_ylim(0, max(100 * curve.max_hit_rate * 1.1, 1))
    tokens_per_gib = 2**30 / kv_bytes_per_token

    def to_gib(t: Any) -> Any:
        return t / tokens_per_gib

    def to_tokens(g: Any) -> Any:
        return g * tokens_per_gib

    top = ax.secondary_xaxis("top", functions=(to_gib, to_tokens))
    top.set_xlabel("cache (GiB)")
    ax.set_title(
        f"{Path(trace.path).name}: block {curve.block_tokens}, scale {trace.token_scale}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    try:  # whole or absent: written under a temporary name, then renamed to ``out`` itself
        write_with(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    finally:
        plt.close(fig)
    return out


def _plot_path(file: Path | None, block_tokens: int, token_scale: str, given: str | None) -> Path:
    """Where the plot goes (``given``, else the default under ``DEFAULT_PLOT_DIR``), checked
    before any work (``loadgen.cli.output_paths``: a ``.png`` name, written as named)."""
    from loadgen.cli.output_paths import check_output_file
    from scenarios.trace_scale import parse_token_scale

    if given is not None:
        check_output_file(given, "--plot", suffix=".png")  # as typed: "dir.png/" is refused
        return Path(given)
    try:
        scale = parse_token_scale(token_scale)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    suffix = "" if scale == 1 else f"-scale{scale}".replace("/", "_")
    stem = file.stem if file is not None else "builtin-fleet"
    default = DEFAULT_PLOT_DIR / f"{stem}-block{block_tokens}{suffix}.png"
    check_output_file(default, "--plot", suffix=".png", create_dir=True)
    return default


def _json(
    trace: Trace,
    summary: TraceSummary,
    curve: HitCurve,
    kv_bytes_per_token: int,
    plot: Path | None,
) -> dict[str, Any]:
    return {
        "trace": {
            "path": trace.path,
            "sha256": trace.sha256,
            "kind": trace.kind,
            "trace_block_tokens": trace.block_tokens,
            "token_scale": str(trace.token_scale),
        },
        "summary": asdict(summary),
        "block_tokens": curve.block_tokens,
        "kv_bytes_per_token": kv_bytes_per_token,
        "max_hit_rate": curve.max_hit_rate,
        "footprint_tokens": curve.footprint_tokens,
        "predicted": [
            {**asdict(p), "cache_bytes": p.cache_tokens * kv_bytes_per_token} for p in curve.points
        ],
        "target_fraction": curve.target_fraction,
        "target_cache_tokens": curve.target_cache_tokens,
        "plot": str(plot) if plot is not None else None,
    }


@trace.command("stats")
@click.argument("file", type=click.Path(path_type=Path), required=False)
@click.option(
    "--cache",
    default=None,
    help="Cache sizes in bytes, comma-separated (1GiB,4GiB); tokens = whole blocks of "
    "block × KV bytes per token. Default: 8 sizes halving down from the trace's "
    "footprint.",
)
@click.option(
    "--cache-tokens",
    default=None,
    help="Cache sizes in tokens, comma-separated (as vLLM reports kv_cache_size_tokens).",
)
@click.option(
    "--block-tokens",
    type=click.IntRange(1, MAX_TOKENS),
    default=CPU_BLOCK_SIZE,
    show_default=True,
    help="The server's KV block size (vLLM CPU: 128).",
)
@click.option(
    "--trace-block-tokens",
    type=click.IntRange(1, MAX_TOKENS),
    default=512,
    show_default=True,
    help="Prompt tokens per hash id in the file (Mooncake: 512).",
)
@click.option(
    "--token-scale",
    default="1",
    show_default=True,
    help="Scale every length and the trace block by this (1/16, 0.0625).",
)
@click.option(
    "--kv-bytes-per-token",
    type=click.IntRange(1, MAX_KV_BYTES_PER_TOKEN),
    default=KV_BYTES_PER_TOKEN,
    show_default=True,
    help="KV bytes per token (default: the embedded model's).",
)
@click.option(
    "--peak-window",
    "peak_window_s",
    type=FiniteFloat(MIN_PEAK_WINDOW_S, MAX_PEAK_WINDOW_S),
    default=10.0,
    show_default=True,
    help=f"Window of the peak arrival rate (s, {MIN_PEAK_WINDOW_S:g} to {MAX_PEAK_WINDOW_S:g}: a "
    "trace's clock is in milliseconds; a window of a year spans any trace).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=str),
    default=None,
    help=f"PNG of the hit-rate curve, a path ending in .png, written as named (default: "
    f"{DEFAULT_PLOT_DIR}/<file>-block<B>[-scale<S>].png).",
)
@click.option("--no-plot", is_flag=True, help="Do not draw the plot.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@fleet_options
def stats(
    file: Path | None,
    cache: str | None,
    cache_tokens: str | None,
    block_tokens: int,
    trace_block_tokens: int,
    token_scale: str,
    kv_bytes_per_token: int,
    peak_window_s: float,
    plot_path: str | None,
    no_plot: bool,
    as_json: bool,
    **fleet_flags: Any,
) -> None:
    """Statistics of trace FILE (none: the built-in fleet workload, docs/fleet.md) and its
    predicted prefix-cache hit rate against cache size.

    Offline: replays the trace's prompt blocks, one request after another in file order,
    against vLLM's prefix-cache rules (docs/traces.md) at each cache size, and reports the
    unbounded maximum and the smallest cache reaching 90 % of it. With --replicas N, also
    the hit rate of N replicas of the --cache size under each --routing policy, between the
    pooled and the spread bounds (docs/fleet.md).
    """
    from scenarios.trace_stats import hit_curve, summarize

    sizes, labels = _cache_tokens(cache, cache_tokens, block_tokens, kv_bytes_per_token)
    try:
        fleet_args = check_fleet_args(
            fleet_flags["replicas"], fleet_flags["routing"], fleet_flags["worker_urls"], sizes,
            labels, given_flags(click.get_current_context()),
        )  # fmt: skip
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    plot = None if no_plot else _plot_path(file, block_tokens, token_scale, plot_path)
    loaded = _load(file, trace_block_tokens, token_scale)
    try:
        summary = summarize(loaded, peak_window_s)
        curve = hit_curve(loaded, block_tokens, sizes)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if plot is not None:
        try:
            _plot(loaded, curve, kv_bytes_per_token, plot)
        except RunWriteError as exc:
            write_error_exit(exc)
    fleet = _fleet(loaded, block_tokens, fleet_args, fleet_flags)
    if as_json:
        out = _json(loaded, summary, curve, kv_bytes_per_token, plot)
        out["fleet"] = None if fleet is None else fleet_json(fleet, kv_bytes_per_token)
        click.echo(dumps(out, "--json"))
    else:
        text = _text(loaded, summary, curve, kv_bytes_per_token, labels, plot)
        if fleet is not None and fleet_args is not None:
            size = _size(fleet.cache_tokens, kv_bytes_per_token)
            text += "\n" + fleet_text(fleet, fleet_args, size)
        click.echo(text)


def _fleet(
    trace: Trace, block_tokens: int, args: FleetArgs | None, flags: dict[str, Any]
) -> FleetStats | None:
    """The fleet prediction the options ask for (``None``: none asked)."""
    if args is None:
        return None
    from gateway.routing import PrefixKeys
    from scenarios.fleet.model import FleetOptions
    from scenarios.fleet.requests import TraceTokens
    from scenarios.trace_stats import fleet_stats

    try:
        return fleet_stats(
            trace,
            block_tokens,
            args.cache_tokens,
            args.replicas,
            args.policies,
            concurrency=flags["concurrency"],
            keys=PrefixKeys(prefix_blocks=flags["routing_prefix_blocks"]),
            options=FleetOptions(epsilon=flags["routing_epsilon"], worker_urls=args.worker_urls),
            tokens=TraceTokens(seed=flags["seed"]),
        )
    except ValueError as exc:
        raise BadInput(str(exc)) from None
