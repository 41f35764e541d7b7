"""The fleet cache model: N replicas of the single-server prefix-cache model
(:mod:`scenarios.prefix_cache_model`) behind a router, per routing policy.

- :mod:`scenarios.fleet.requests`: what a request carries for the routers (the gateway's
  key, vllm-router's routing text) and the event orders replayed.
- :mod:`scenarios.fleet.simulate`: the replay of N caches under a placement rule.
- :mod:`scenarios.fleet.rules`, :mod:`scenarios.fleet.cache_aware`,
  :mod:`scenarios.fleet.kv_aware`, :mod:`scenarios.fleet.vllm_router_hash`: the placement
  rules (the gateway's own function, vllm-router's ported).
- :mod:`scenarios.fleet.model`: per policy, the prediction and the two bounds.

docs/fleet.md describes the model and each policy.
"""
