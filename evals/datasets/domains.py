"""Named domains: source categories that are the same thing share one domain name.

Reports group by domain; users ask first for `coding`, `summarization` and long
context (`<tier>@<length>`, e.g. `low_entropy@32k`). Every record also keeps the
source's own category.
"""

from __future__ import annotations

from speclens.figures.metrics import length_label

# Source category (lower case) -> domain. Categories not listed are their own domain.
SHARED_DOMAINS = {
    "humaneval": "coding",
    "code": "coding",
    "coding": "coding",
    "summarization": "summarization",
    "summarisation": "summarization",
}


def domain_of(category: str) -> str:
    return SHARED_DOMAINS.get(category.strip().lower(), category)


def long_context_domain(tier: str, tokens: int) -> str:
    return f"{tier}@{length_label(tokens)}"
