"""Credentials kept out of files and consoles: which header names, body keys and values are
secrets, and redacting them wherever they nest.

A header name or a JSON key names a credential when one of its words (split at anything but
letters and digits, and at lower-to-upper case changes: ``X-Api-Key``, ``api_key``,
``apiKey``) contains a credential stem (:data:`STEMS`: ``auth``, ``secret``, ``passw``,
``jwt``, ``bearer``, ``signature``, ``cookie``, ``credential``, ``session``, …), or ends with a
credential noun (:data:`NOUNS`: ``token``, ``key``, ``sig``, …). A header name also counts when
such a noun is any of its words (``X-Token-Value``): header names are a credential vocabulary.
A body key counts for a noun only as its last word: in an LLM request ``token`` names text
tokens (``stop_token_ids``, ``max_tokens``, ``skip_special_tokens`` are not secrets, and their
values say what was sent), while ``access_token``, ``api_key``, ``hmac_sig`` end on the noun.

A name also counts when one of its words is a credential word (:data:`WORDS`: ``pass``,
``pw``, ``access``: ``X-Pass``, ``X-Access``, ``{"pass": …}``), whole words only, so
``passthrough`` or ``accessible`` are not secrets; and a name that is nothing but a key's
well-known prefix (:data:`PREFIX_NAMES`: ``sk``, ``hf``, ``ghp``, …) counts too (a header may
hold it as any word: ``X-HF``; a body key only as its whole name: ``{"hf": …}`` but not
``hf_overrides``).

A value is a credential whatever its name when it reads as one: an HTTP authorization scheme
and its parameters (``Bearer …``, ``Basic …``), a JSON Web Token (``eyJ….….``), or a
well-known API key shape anywhere in it (:data:`KEY_SHAPES`: ``sk-…``, ``sk-proj-…``,
``hf_…``, ``ghp_…``/``gho_…``/``github_pat_…``, ``xoxb-…``/``xoxp-…``, ``AKIA…``, ``AIza…``,
``glpat-…``): its prefix, then at least a shape's length of letters, digits, ``-`` and ``_``
mixing at least two of lower case, upper case and digits (random, not a word:
``sk-learn-models`` is no key, ``sk-SECRETSK16`` is).

Everything here is linear in its input (no regular expression backtracks over a value).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: What replaces a secret value in every file and on the console.
REDACTED = "<redacted>"

#: A word containing one of these names a credential (``authorization``, ``x-auth``,
#: ``client_secret``, ``password``, ``passwd``, ``jwt``, ``bearer``, ``set-cookie``, ...).
STEMS = (
    "auth", "secret", "passw", "passphrase", "pwd", "jwt", "bearer", "signature", "cookie",
    "credential", "creds", "session", "private",
)  # fmt: skip
#: A name with one of these as a whole word names a credential (``X-Pass``, ``X-Access``).
WORDS = ("pass", "pw", "access", "passcode")
#: The prefixes of well-known API keys: a name that is one of them names a credential.
PREFIX_NAMES = ("sk", "hf", "ghp", "gho", "ghu", "ghs", "ghr", "glpat", "xoxb", "xoxp", "akia")
#: Well-known API key shapes: (prefix, the fewest characters after it). OpenAI ``sk-`` (also
#: ``sk-proj-``, ``sk-ant-``), Hugging Face ``hf_``, GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/
#: ``ghr_``/``github_pat_``, Slack ``xox?-``, AWS access key IDs ``AKIA``/``ASIA`` (16 more),
#: Google ``AIza`` (35 more), GitLab ``glpat-`` (20 more).
KEY_SHAPES = (
    ("sk-", 8), ("hf_", 8), ("ghp_", 16), ("gho_", 16), ("ghu_", 16), ("ghs_", 16),
    ("ghr_", 16), ("github_pat_", 16), ("xoxb-", 8), ("xoxp-", 8), ("xoxa-", 8),
    ("xoxr-", 8), ("xoxs-", 8), ("AKIA", 16), ("ASIA", 16), ("AIza", 30), ("glpat-", 16),
)  # fmt: skip
#: A name whose last word ends with one of these names a credential (``api_key``,
#: ``apikey``, ``access_token``, ``x-amz-security-token``, ``hmac_sig``, ``api_keys``).
NOUNS = ("token", "key", "keys", "sig", "otp")
#: Authorization schemes (RFC 9110 §11.4) whose parameters are the secret.
AUTH_SCHEMES = ("bearer", "basic", "digest", "token", "negotiate", "apikey")


def name_words(name: str) -> list[str]:
    """The lower-cased words of ``name``: split at every character that is not a letter or a
    digit, and where a lower-case letter or digit is followed by an upper-case one
    (``"X-ApiKey_v2"`` → ``["x", "api", "key", "v2"]``)."""
    words: list[str] = []
    current: list[str] = []
    previous = ""
    for char in name:
        if not char.isalnum():
            if current:
                words.append("".join(current))
            current, previous = [], ""
            continue
        if char.isupper() and (previous.islower() or previous.isdigit()) and current:
            words.append("".join(current))
            current = []
        current.append(char)
        previous = char
    if current:
        words.append("".join(current))
    return [w.lower() for w in words]


def _stem_in(words: list[str]) -> bool:
    return any(stem in word for word in words for stem in STEMS)


def is_credential_header(name: str) -> bool:
    """Whether a header called ``name`` carries a credential (its value is never written):
    a credential stem in any word, a credential noun, word or key prefix as any word, or a
    noun ending its last."""
    words = name_words(name)
    whole = NOUNS + WORDS + PREFIX_NAMES
    return _stem_in(words) or any(w in whole for w in words) or _noun_ends(words)


def is_credential_key(key: str) -> bool:
    """Whether a JSON body field called ``key`` carries a credential: a credential stem or
    word in any word, its last word ending with a credential noun (``api_key``,
    ``accessToken``; not ``stop_token_ids`` or ``max_tokens``), or the whole key a key
    prefix (``sk``, ``hf``; not ``hf_overrides``)."""
    words = name_words(key)
    if words in ([p] for p in PREFIX_NAMES):
        return True
    return _stem_in(words) or any(w in WORDS for w in words) or _noun_ends(words)


def _noun_ends(words: list[str]) -> bool:
    return bool(words) and words[-1].endswith(NOUNS)


def looks_like_credential(value: str) -> bool:
    """Whether ``value`` reads as a credential whatever it is called: an authorization scheme
    followed by its parameters (``"Bearer abc"``, ``"Basic dXNlcjpwdw=="``), a JSON Web
    Token (three dot-separated parts, the first ``eyJ``: base64 of ``{"``), or a run of
    letters, digits, ``-`` and ``_`` anywhere in it shaped as a well-known API key
    (:data:`KEY_SHAPES`). Linear in ``len(value)``."""
    text = value.strip()
    scheme, sep, rest = text.partition(" ")
    if sep and rest.strip() and scheme.lower() in AUTH_SCHEMES:
        return True
    if text.startswith("eyJ") and text.count(".") >= 2:
        return True
    return any(_key_shaped(run) for run in _runs(text))


_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def _runs(text: str) -> Iterator[str]:
    """The maximal runs of key characters (letters, digits, ``-``, ``_``) in ``text``."""
    start = None
    for i, char in enumerate(text):
        if char in _KEY_CHARS:
            start = i if start is None else start
        elif start is not None:
            yield text[start:i]
            start = None
    if start is not None:
        yield text[start:]


def _key_shaped(run: str) -> bool:
    """Whether a run of key characters is a :data:`KEY_SHAPES` key: a prefix, then at least
    its length of characters mixing two of lower case, upper case and digits."""
    for prefix, fewest in KEY_SHAPES:
        if run.startswith(prefix) and len(run) - len(prefix) >= fewest:
            rest = run[len(prefix) :]
            kinds = (
                any(c.islower() for c in rest)
                + any(c.isupper() for c in rest)
                + any(c.isdigit() for c in rest)
            )
            return kinds >= 2
    return False


def redact_header_value(name: str, value: str) -> str:
    """``value`` as written: :data:`REDACTED` when the header is a credential."""
    return REDACTED if is_credential_header(name) or looks_like_credential(value) else value


def redact_fields(obj: Any) -> Any:
    """A copy of the JSON value ``obj`` with the value of every credential key, at any
    depth of objects and arrays, replaced by :data:`REDACTED`, and every string that reads
    as a credential too. Iterative (a deeply nested value cannot exhaust the stack)."""
    root: list[Any] = [None]
    stack: list[tuple[Any, list[Any] | dict[str, Any], Any]] = [(obj, root, 0)]
    while stack:
        value, parent, slot = stack.pop()
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            parent[slot] = out
            for key, item in value.items():
                if isinstance(key, str) and is_credential_key(key):
                    out[key] = REDACTED
                else:
                    out[key] = None
                    stack.append((item, out, key))
        elif isinstance(value, list | tuple):
            items: list[Any] = [None] * len(value)
            parent[slot] = items
            stack.extend((item, items, i) for i, item in enumerate(value))
        elif isinstance(value, str) and looks_like_credential(value):
            parent[slot] = REDACTED
        else:
            parent[slot] = value
    return root[0]


def credential_keys(obj: Any) -> Iterator[str]:
    """The credential keys of ``obj`` at any depth (for messages that name what was hidden)."""
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            yield from (k for k in value if isinstance(k, str) and is_credential_key(k))
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
