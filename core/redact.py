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
    """A copy of `value` with every dict entry under a secret-looking key replaced, and the
    secret-keyed `key=value` items inside strings (Hydra's recorded overrides) too."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_key(str(k)) and v not in (None, "") else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and "=" in value:
        return redact_overrides(value)
    return value


# A `key=value` item of a command line or of Hydra's comma-joined override_dirname, or a `key: value`
# entry of a dict-valued override (`engine.extra_args={hf_token: x}`); a value ends at a separator.
_PAIR = re.compile(r"""(['"]?)([\w.\-]+)\1(\s*[=:]\s*)('[^']*'|"[^"]*"|[^,{}\[\]\s]*)""")


def redact_overrides(text: str) -> str:
    """`text` (`a.b=1,engine.extra_args.hf_token=xyz`, `+engine.extra_args={hf_token: xyz}`) with
    secret-keyed values replaced."""

    def replace(match: re.Match) -> str:
        quote, key, sep, value = match.groups()
        secret = value and is_secret_key(key.rsplit(".", 1)[-1])
        return f"{quote}{key}{quote}{sep}{REDACTED if secret else value}"

    return _PAIR.sub(replace, text)
