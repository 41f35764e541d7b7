"""The frozen pydantic base every typed config, plan, check and report model shares.

Frozen: a model is a value (hashable, safe to share between cases and threads, never edited
after validation); ``extra="forbid"``: a misspelt field in a plan, a gate file or a report is
an error, not silently dropped. It lives in ``server``, the lowest package, so that
``scenarios``, ``loadgen`` and ``analysis`` may all import it (tests/test_package_layering.py);
``gateway`` and ``metrics`` import no project package and keep their own config.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    """A pydantic model that is immutable and refuses unknown fields.

    Subclasses may add settings with their own ``model_config`` (pydantic merges it with this
    one), e.g. ``ConfigDict(allow_inf_nan=False)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
