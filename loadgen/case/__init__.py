"""One case of a run, by responsibility (``loadgen.execute`` runs the cases in order):

- ``starts.py``: what a case starts: its servers (replica 0 and replicas 1…n−1), the scraper,
  and the relay in front of them (``loadgen.proxies``), placed off the servers' cores;
- ``fleet.py``: what a fleet case adds: a scraper per replica, every prefix cache emptied;
- ``phases.py`` (with ``late.py``, the late-bound figures): its phases in order, each sent
  by the case's sender (``loadgen.senders``), then settled and written to ``phases.jsonl``;
- ``ending.py``: how it ends: the exception that ended it → its status, ``case.json``;
- ``hooks.py``: the progress callbacks the CLI renders.
"""
