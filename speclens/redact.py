"""Secrets out of every config dump and log: values under keys that name a credential, and the
credentials of URLs (`http://user:password@host` -> `http://***@host`)."""

from __future__ import annotations

import re
from typing import Any

# hf_token, access_token, api_key, client_secret, password, ... but not max_tokens or tokenizer.
SECRET_KEY = re.compile(
    r"(^|_)(token|secret|password|passwd|api_?key|access_?key|secret_?key|private_?key|credentials?|auth|authorization)$"
    r"|(^|_)(secret|password|credentials?)(_|$)"
)
REDACTED = "***redacted***"
# A URL's userinfo: from the scheme's `//` to the authority's last `@` (a password may hold an
# unescaped `@`; the authority ends at `/`, `?`, `#` or a character no URL holds). Hydra's logs
# escape the colons (`http\://user\:password@host`).
_URL_USERINFO = re.compile(r"""\b([A-Za-z][A-Za-z0-9+.\-]*\\?://)[^/?#\s"<>\[\]{}|^`]*@""")


def is_secret_key(key: str) -> bool:
    return SECRET_KEY.search(key.lower().replace("-", "_")) is not None


def redact_url(text: str) -> str:
    """`text` with the credentials of every URL in it replaced: `http://***@host:port`."""
    return _URL_USERINFO.sub(r"\1***@", text)


def redact(value: Any) -> Any:
    """A copy of `value` with every dict entry under a secret-looking key replaced, the
    secret-keyed `key=value` items inside strings (Hydra's recorded overrides) too, and every
    URL's credentials."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_key(str(k)) and v not in (None, "") else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_overrides(value) if "=" in value else redact_url(value)
    return value


# A `key=value` item of a command line or of Hydra's comma-joined override_dirname, or a `key: value`
# entry of a dict-valued override (`engine.extra_args={hf_token: x}`); a value ends at a separator.
_PAIR = re.compile(r"""(['"]?)([\w.\-]+)\1(\s*[=:]\s*)('[^']*'|"[^"]*"|[^,{}\[\]\s]*)""")


def redact_overrides(text: str) -> str:
    """`text` (`a.b=1,engine.extra_args.hf_token=xyz`, `+engine.extra_args={hf_token: xyz}`) with
    secret-keyed values and URL credentials replaced."""

    def replace(match: re.Match) -> str:
        quote, key, sep, value = match.groups()
        secret = value and is_secret_key(key.rsplit(".", 1)[-1])
        return f"{quote}{key}{quote}{sep}{REDACTED if secret else value}"

    return redact_url(_PAIR.sub(replace, text))
