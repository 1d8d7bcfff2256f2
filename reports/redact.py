"""Secrets out of every config dump and log: values under keys that name a credential."""

from __future__ import annotations

import re
from typing import Any

# hf_token, access_token, api_key, client_secret, password, ... but not max_tokens or tokenizer.
SECRET_KEY = re.compile(
    r"(^|_)(token|secret|password|passwd|api_?key|access_?key|secret_?key|private_?key|credentials?|auth|authorization)$"
    r"|(^|_)(secret|password|credentials?)(_|$)"
)
REDACTED = "***redacted***"


def is_secret_key(key: str) -> bool:
    return SECRET_KEY.search(key.lower().replace("-", "_")) is not None


def redact(value: Any) -> Any:
    """A copy of `value` with every dict entry under a secret-looking key replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_key(str(k)) and v not in (None, "") else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value
