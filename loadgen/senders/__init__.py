"""How a case's load is sent: one interface (:class:`~loadgen.senders.base.Sender`) for this
process alone (``local.py``) and for a pool of workers (``loadgen.workers.sender``);
``choice.py`` opens the one a run asks for."""
