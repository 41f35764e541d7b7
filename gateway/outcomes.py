"""Which upstream outcomes count as circuit-breaker failures: the gateway's rule book (pure).

The classification follows Envoy's outlier detection (envoyproxy.io, "Outlier detection",
arch_overview/upstream/outlier): *locally originated* errors (timeouts, resets, failed
connects) and *externally originated* ones (the upstream answered with a 5xx) both count,
``consecutive_5xx`` takes every 5xx, and a 4xx is an answer, not an upstream failure. An LLM
stream adds failures Envoy's router cannot see, because the status line is sent before the
work is done.

**Failures** (they feed the consecutive-failure and error-rate rules):

- connect refused or reset, connect timeout, first-token, idle and total timeouts;
- HTTP 5xx except 501 and 505: those two say the *request* asks for something the server does
  not implement (vLLM answers 501 for a ``NotImplementedError``), which is true of a healthy
  upstream too and would let one client's requests eject a replica;
- an error event inside a 200 stream (an event named ``error``, or a ``data:`` payload that is
  a JSON object with an ``error`` member, also when split across reads; vLLM sends such an
  event, then ``[DONE]``, when generation fails after the headers went out). The code inside
  the event is not used: vLLM labels many mid-stream server failures 400;
- a 200 stream that ends before ``data: [DONE]``, or breaks off (connection reset, bad chunked
  framing), or sends an event larger than the gateway's response limit;
- an answer in a ``Content-Encoding`` the gateway cannot decode (it asks for identity and
  decodes gzip and deflate; anything else is refused, never relayed);
- a 200 answer to a streaming request that is not ``text/event-stream``, a 200 JSON body that
  is an error object, a body larger than the gateway's response limit;
- a first token slower than ``slow_first_token_s`` (when configured).

**Successes**: any other answer that arrived whole, including 3xx and 4xx other than 429 (the
upstream did its job; the client's request was wrong).

**No verdict**: HTTP 429, an admission rejection (a 503 that says so, below) and a client
that went away. A 429 is back-pressure from a working
upstream: counting it would eject a replica for being busy and pile its load on the others.
The gateway passes the 429 on to the client, ``Retry-After`` included (checked, see
:mod:`gateway.retry_after`), rather than retrying on another replica: a 429 means the system
is at capacity, and a proxy that retries it turns back-pressure into more load (the retry
amplification described in Google's SRE book, "Handling Overload"); Envoy's router likewise
retries 429 only when told to (``retriable_status_codes``). A half-open probe answered 429
frees its probe slot and the breaker stays half-open. The wait an upstream asks for (on a
429 or 503) does not stop routing to it; it is remembered per upstream and lengthens the
``Retry-After`` of the gateway's own 503 when no upstream takes traffic.

An *admission rejection* is a 503 from a working upstream that refuses new work because its
queue is at its limit: vLLM's ``--max-num-queued-reqs`` / ``--max-num-queued-tokens`` answer
503 with the error type ``Service Unavailable`` (its graceful-rejection answer; a failing
engine's retryable 503 is typed ``ServiceUnavailableError``) and no ``Retry-After``; when
the stream has already begun, it sends the same error object as an event inside the 200
(seen on vLLM 0.32 under load), which is no verdict either. Counting
it as a failure would open the breaker on a server that is busy, not broken: the very moment
it must keep taking its share. Any other 503 stays a failure, with or without a
``Retry-After`` (a server down for maintenance sends one too).

See docs/gateway.md.
"""

from __future__ import annotations

import enum
import json


class Verdict(enum.Enum):
    """What an outcome tells the breaker about the upstream."""

    SUCCESS = "success"
    FAILURE = "failure"
    NO_VERDICT = "no_verdict"


#: 5xx statuses that describe the request, not the upstream's health (see module docstring).
REQUEST_DEPENDENT_5XX: frozenset[int] = frozenset({501, 505})

#: Back-pressure: the upstream works but asks the client to slow down.
BACK_PRESSURE: frozenset[int] = frozenset({429})


def status_verdict(status: int) -> Verdict:
    """The verdict of an HTTP answer that arrived whole, from its status code alone."""
    if status in BACK_PRESSURE:
        return Verdict.NO_VERDICT
    if 500 <= status <= 599 and status not in REQUEST_DEPENDENT_5XX:
        return Verdict.FAILURE
    return Verdict.SUCCESS


#: The error ``type`` of vLLM's graceful HTTP rejections (``GracefulHTTPError``: the phrase of
#: its status), which its admission limits raise with 503.
ADMISSION_ERROR_TYPE = "Service Unavailable"


def is_admission_rejection(status: int, body: bytes) -> bool:
    """Whether an answer is an upstream's admission rejection (module docstring): a 503 whose
    JSON body is an error of type :data:`ADMISSION_ERROR_TYPE`."""
    if status != 503:
        return False
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    error = payload.get("error") if isinstance(payload, dict) else None
    return isinstance(error, dict) and error.get("type") == ADMISSION_ERROR_TYPE


def is_error_body(body: bytes) -> bool:
    """Whether a 200 body is an OpenAI-style error object (``{"error": {...}}``, non-null)."""
    if b'"error"' not in body:
        return False
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(payload, dict) and payload.get("error") is not None
