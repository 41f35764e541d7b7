"""What an engine step of a replica costs, fitted on a run's own request records: the constants
of :mod:`analysis.fleet_engine`'s step model

    step time (s) = c0 + c_p × prompt tokens computed + c_d × decode sequences

with the time a request spends outside the engine (a) and how much replicas sharing cores slow
each other (κ). Every figure comes from the records' timestamps (``sent_ns``, the per-token
``chunk_ns``/``chunk_tokens``, ``end_ns``), the replica that served each request
(``upstream``; one server when no router names it) and the tokens the server reported cached.
A request's token gaps are the engine's steps seen from outside: a gap of t tokens spans t
steps (:func:`token_gaps`). Only gaps and requests during which no other replica had a
request in flight enter steps 1–2, so sharing cores does not leak into the step costs; step 3
uses the others.

1. **c0 and c_d, decode steps**: a gap while every other request in flight on the replica was
   decoding is t steps of k + 1 decode sequences (k the others): gap ÷ t = c0 + c_d × (k + 1).
   Least squares over these gaps gives c_d (slope) and c0; where k does not vary, or the fit
   gives c_d < 0 or c0 < 0, c_d = 0 and c0 = Σ gaps ÷ Σ t (a decode sequence taken to cost
   nothing beyond the step).
2. **a and c_p, first tokens**: requests sent while their replica had no other request in
   flight (:func:`unqueued`) have TTFT = a + c0 + c_p × u (u uncached
   prompt tokens; one step while u ≤ the token budget). Least squares of TTFT on u with an
   intercept per case gives c_p (the slope within cases: cases that ran under different
   loads differ in a, :func:`fit_prefill`) and a = the cases' mean intercept − c0; where u
   does not vary within any case, or the fit gives c_p ≤ 0 or a < 0, a = 0 and
   c_p = Σ (TTFT − c0) ÷ Σ u (the whole first token taken as engine time).
3. **κ_p and κ_d, replicas sharing cores**: the same idle requests while other replicas were
   busy, with φ the time-average over [sent, first token] of how many other replicas had a
   request in flight: TTFT = a + base × (1 + κ_p × φ), base = c0 + c_p × u, so
   κ_p = Σ (TTFT − a − base) ÷ Σ (base × φ) (sums keep the fitted requests' total); and the
   decode gaps of step 1 while other replicas were busy (φ over the gap):
   gap = t × (c0 + c_d × (k + 1)) × (1 + κ_d × φ), so κ_d = Σ (gap − base) ÷ Σ (base × φ),
   base = t × (c0 + c_d × (k + 1)). Each at least 0; 0 where no request or gap saw another
   replica busy (one server).

The token budget and sequence cap are the server's (``--max-num-batched-tokens``,
``--max-num-seqs``), else vLLM's defaults for its OpenAI server on CPU: 2048 tokens and 128
sequences (``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``, vLLM 0.32.0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

#: vLLM's CPU defaults for its OpenAI server (module docstring).
CPU_BUDGET_TOKENS = 2048
CPU_MAX_SEQS = 128


class StepCost(BaseModel):
    """The step model's constants (module docstring); seconds unless named otherwise.

    Attributes:
        overhead_s: a, from a request's send to its arrival in the engine.
        step_s: c0, per engine step.
        prefill_s_per_token: c_p, per prompt token computed in a step.
        decode_s_per_seq: c_d, per decode sequence in a step.
        contention: κ_p, the slowdown of a step that computes prompt tokens per other
            replica in a step at once (dimensionless).
        contention_decode: κ_d, the same for a step that only decodes.
        budget_tokens: tokens one step computes at most (``max_num_batched_tokens``).
        max_seqs: requests running at once at most (``max_num_seqs``).
        requests: idle requests steps 2–3 used; gaps: token gaps step 1 used.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    overhead_s: float
    step_s: float
    prefill_s_per_token: float
    decode_s_per_seq: float
    contention: float = 0.0
    contention_decode: float = 0.0
    budget_tokens: int = CPU_BUDGET_TOKENS
    max_seqs: int = CPU_MAX_SEQS
    requests: int = 0
    gaps: int = 0


def unqueued(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (``analysis.latency.request_frame``) that were sent while no other
    request of their case was in flight on their replica: none sent at or before them and
    ending after their send. The replica is the record's ``upstream`` (the gateway names it);
    where it is unknown (one server, or a router that does not say) every request of the case
    counts as on the same replica."""
    if frame.empty or "sent_ns" not in frame:
        return frame.iloc[0:0]
    frame = frame.reset_index(drop=True)  # frames of several cases repeat index labels
    keep = []
    upstream = frame["upstream"] if "upstream" in frame else pd.Series(None, index=frame.index)
    place = frame["case"].astype(str) + "|" + upstream.fillna("").astype(str)
    for _, group in frame.assign(_place=place).groupby("_place", sort=False):
        sent = group["sent_ns"].astype(float).to_numpy()
        end = group["end_ns"].astype(float).fillna(np.inf).to_numpy()
        for row, s in zip(group.index, sent, strict=True):
            if math.isnan(s):
                continue
            others = (sent <= s) & (end > s)
            if int(others.sum()) == 1:  # itself only
                keep.append(row)
    return frame.loc[keep]


def _prepared(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s successful requests with a first token, reindexed, with ``_replica``
    (``case|upstream``), ``first_ns`` and ``u`` (uncached prompt tokens; NaN unknown)."""
    frame = frame.reset_index(drop=True)
    upstream = frame["upstream"] if "upstream" in frame else pd.Series(None, index=frame.index)
    frame = frame.assign(_replica=frame["case"].astype(str) + "|"
                         + upstream.fillna("").astype(str))  # fmt: skip
    ok = frame[(frame["status"] == "ok") & frame["sent_ns"].notna() & frame["end_ns"].notna()]
    ok = ok[[bool(r.chunk_ns) for r in ok["record"]]]
    return ok.assign(first_ns=[float(r.chunk_ns[0]) for r in ok["record"]],
                     u=(ok["prompt_tokens_sent"] - ok["cached_tokens"]).astype(float))  # fmt: skip


#: Per case, per replica (``case|upstream``): the union of its requests' [sent_ns, end_ns)
#: as disjoint intervals, starts and ends (ns).
Flights = dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]


def flights_of(ok: pd.DataFrame) -> Flights:
    """The :data:`Flights` of ``ok`` (rows with ``case``, ``_replica``, ``sent_ns``,
    ``end_ns``)."""
    out: Flights = {}
    for (case, replica), group in ok.groupby(["case", "_replica"]):
        merged: list[list[float]] = []
        for s, e in sorted(zip(group["sent_ns"], group["end_ns"], strict=True)):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        spans = np.array(merged, dtype=float).reshape(-1, 2)
        out.setdefault(str(case), {})[str(replica)] = (spans[:, 0], spans[:, 1])
    return out


def busy_others(flights: Flights, replica: str, start: float, end: float) -> float:
    """Time-average over [start, end] (ns) of how many replicas of ``replica``'s case other
    than it had a request in flight; 0.0 for an empty interval."""
    if end <= start:
        return 0.0
    covered = 0.0
    for other, (s, e) in flights.get(replica.split("|", 1)[0], {}).items():
        if other != replica:
            covered += float(np.clip(np.minimum(e, end) - np.maximum(s, start), 0, None).sum())
    return covered / (end - start)


def token_gaps(frame: pd.DataFrame) -> pd.DataFrame:
    """Every gap between two token arrivals of a successful request of ``frame``
    (``analysis.latency.request_frame`` rows) while every other request in flight on its
    replica was decoding (module docstring, step 1): ``sequences`` (k + 1), ``seconds``,
    ``tokens`` and ``others`` (φ, the other replicas in flight, time-averaged over it)."""
    ok = _prepared(frame)
    flights = flights_of(ok)
    rows = []
    for replica, mine in ok.groupby("_replica"):
        sent, end = mine["sent_ns"].to_numpy(float), mine["end_ns"].to_numpy(float)
        first = mine["first_ns"].to_numpy()
        for i, rec in enumerate(mine["record"]):
            stamps, tokens = rec.chunk_ns, rec.chunk_tokens
            for a, b, t in zip(stamps[:-1], stamps[1:], tokens[1:], strict=True):
                live = (sent < b) & (end > a)
                live[i] = False
                if (live & (first > a)).any():
                    continue  # another request's prompt was computed during the gap
                phi = busy_others(flights, str(replica), a, b)
                rows.append({"sequences": int(live.sum()) + 1, "seconds": (b - a) / 1e9,
                             "tokens": t, "others": phi})  # fmt: skip
    return pd.DataFrame(rows, columns=["sequences", "seconds", "tokens", "others"])


def fit_step(gaps: pd.DataFrame) -> tuple[float, float] | None:
    """(c0, c_d) in s from :func:`token_gaps`' rows with no other replica busy (module
    docstring, step 1); ``None`` without one."""
    decode = gaps[gaps["others"] == 0]
    if decode.empty:
        return None
    per_token = decode["seconds"] / decode["tokens"]
    if decode["sequences"].nunique() >= 2:
        slope, c0 = (float(v) for v in np.polyfit(decode["sequences"], per_token, 1))
        if slope >= 0 and c0 >= 0:
            return c0, slope
    return float(decode["seconds"].sum() / decode["tokens"].sum()), 0.0


def fit_decode_contention(gaps: pd.DataFrame, c0: float, c_d: float) -> float:
    """κ_d from :func:`token_gaps`' rows with other replicas busy (module docstring, step 3);
    0.0 without one."""
    busy = gaps[gaps["others"] > 0]
    base = busy["tokens"] * (c0 + c_d * busy["sequences"])
    if busy.empty or float((base * busy["others"]).sum()) <= 0:
        return 0.0
    return max(float((busy["seconds"] - base).sum() / (base * busy["others"]).sum()), 0.0)


def fit_prefill(
    ttft_s: np.ndarray, u: np.ndarray, c0: float, groups: np.ndarray | None = None
) -> tuple[float, float]:
    """(a in s, c_p in s per token) from idle requests' TTFTs (s) and uncached tokens (module
    docstring, step 2); needs at least one request with u > 0.

    ``groups`` (one label per request, e.g. its case) fits c_p within each group: the
    least-squares slope with an intercept per group (the fixed-effects, or within, estimator:
    Σ (u − ū_g)(y − ȳ_g) ÷ Σ (u − ū_g)², ū_g and ȳ_g the group's means). Cases that ran under
    different loads differ in the time outside the engine; one slope over all of them would
    take that difference for prompt cost whenever the cases' prompts differ too. a is then the
    request-weighted mean of the groups' intercepts, ȳ − c_p × ū, less c0. Without ``groups``
    it is the ordinary least-squares line."""
    labels = np.zeros(len(u)) if groups is None else np.asarray(groups)
    frame = pd.DataFrame({"g": labels, "u": u, "y": ttft_s})
    du = frame["u"] - frame.groupby("g")["u"].transform("mean")
    dy = frame["y"] - frame.groupby("g")["y"].transform("mean")
    spread = float((du * du).sum())
    if spread > 0:
        slope = float((du * dy).sum()) / spread
        intercept = float(frame["y"].mean()) - slope * float(frame["u"].mean())
        if slope > 0 and intercept - c0 >= 0:
            return intercept - c0, slope
    return 0.0, float(max((ttft_s - c0).sum(), 0.0) / u.sum())


def fit_step_cost(
    frame: pd.DataFrame, budget_tokens: int = CPU_BUDGET_TOKENS, max_seqs: int = CPU_MAX_SEQS
) -> StepCost | None:
    """Fit :class:`StepCost` (module docstring) on ``frame`` (``request_frame`` rows of one or
    more cases, with ``cached_tokens``); ``None`` without a decode gap or an idle request
    that computed a prompt token."""
    if frame.empty or "cached_tokens" not in frame or "sent_ns" not in frame:
        return None
    gaps = token_gaps(frame)
    step = fit_step(gaps)
    if step is None:
        return None
    c0, c_d = step
    ok = _prepared(frame)
    idle = _prepared(unqueued(frame))
    idle = idle[idle["u"] > 0]
    if idle.empty:
        return None
    spans = zip(idle["_replica"], idle["sent_ns"], idle["first_ns"], strict=True)
    flights = flights_of(ok)
    phi = np.array([busy_others(flights, str(r), s, f) for r, s, f in spans])
    ttft, u = (idle["first_ns"] - idle["sent_ns"]).to_numpy(float) / 1e9, idle["u"].to_numpy()
    alone = phi == 0 if (phi == 0).any() else np.ones(len(phi), dtype=bool)
    cases = idle["case"].astype(str).to_numpy()
    a, c_p = fit_prefill(ttft[alone], u[alone], c0, cases[alone])
    base = c0 + c_p * u
    shared = phi > 0
    kappa = 0.0
    if shared.any() and (phi == 0).any():
        kappa = max(float((ttft[shared] - a - base[shared]).sum()
                          / (base[shared] * phi[shared]).sum()), 0.0)  # fmt: skip
    return StepCost(overhead_s=a, step_s=c0, prefill_s_per_token=c_p, decode_s_per_seq=c_d,
                    contention=kappa, contention_decode=fit_decode_contention(gaps, c0, c_d),
                    budget_tokens=budget_tokens, max_seqs=max_seqs, requests=len(idle),
                    gaps=int((gaps["others"] == 0).sum()))  # fmt: skip
