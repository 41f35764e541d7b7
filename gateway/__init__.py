"""The gateway: an aiohttp reverse proxy in front of one or more vLLM upstreams.

It owns routing (least in-flight among upstreams whose circuit breaker admits traffic),
cancellation propagation, layered timeouts, admission control and its own ``/health`` and
``/metrics``. Start it from code with :func:`gateway.app.running_gateway` or from the command
line with :func:`gateway.cli.main` (mounted as ``loadgen gateway``).

Heavy imports stay in the submodules so that importing this package is cheap.
"""
