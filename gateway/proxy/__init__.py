"""The proxy for ``/v1/*``: one proxied exchange from request body to last byte.

- :mod:`gateway.proxy.handler`: the aiohttp handlers; size limit (413), admission (429),
  upstream choice through :mod:`gateway.upstream_choice` (503 when no upstream takes traffic), one
  retry elsewhere after a refused connection, and ``/metrics``.
- :mod:`gateway.proxy.forward`: forwarding one attempt, from sending to relaying, and noticing
  a client that went away.
- :mod:`gateway.proxy.exchange`: one request on one upstream; the upstream call, and what
  happens when the client goes away: with ``propagate_cancellation`` the upstream connection is
  closed at once (vLLM aborts the request); without it the response is drained in the
  background (:mod:`gateway.proxy.cancel`).
- :mod:`gateway.proxy.stream` and :mod:`gateway.proxy.buffered`: relaying an event stream
  (watched for ``[DONE]`` and error events) or a whole body.
- :mod:`gateway.proxy.verdicts`: the attempt's breaker verdict, given once (what fails is
  decided in :mod:`gateway.outcomes`).
- :mod:`gateway.proxy.timeouts`: the layered timeouts (504, or an SSE error event once a
  stream has started); :mod:`gateway.proxy.client`: writing to the client, its headers;
  :mod:`gateway.proxy.answers`: the gateway's own error bodies, which never name an upstream.

Timing: every limit is in seconds; time is ``time.monotonic()``.
"""
