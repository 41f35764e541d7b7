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

A value is a credential whatever its name when it reads as one: an HTTP authorization scheme
and its parameters (``Bearer …``, ``Basic …``) or a JSON Web Token (``eyJ….….``).

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
    a credential stem in any word, or a credential noun as any word or ending its last."""
    words = name_words(name)
    return _stem_in(words) or any(w in NOUNS for w in words) or _noun_ends(words)


def is_credential_key(key: str) -> bool:
    """Whether a JSON body field called ``key`` carries a credential: a credential stem in
    any word, or its last word ending with a credential noun (``api_key``, ``accessToken``;
    not ``stop_token_ids`` or ``max_tokens``)."""
    words = name_words(key)
    return _stem_in(words) or _noun_ends(words)


def _noun_ends(words: list[str]) -> bool:
    return bool(words) and words[-1].endswith(NOUNS)


def looks_like_credential(value: str) -> bool:
    """Whether ``value`` reads as a credential whatever it is called: an authorization scheme
    followed by its parameters (``"Bearer abc"``, ``"Basic dXNlcjpwdw=="``), or a JSON Web
    Token (three dot-separated parts, the first ``eyJ``: base64 of ``{"``)."""
    text = value.strip()
    scheme, sep, rest = text.partition(" ")
    if sep and rest.strip() and scheme.lower() in AUTH_SCHEMES:
        return True
    return text.startswith("eyJ") and text.count(".") >= 2


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
