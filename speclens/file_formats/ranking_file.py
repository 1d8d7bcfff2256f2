"""ranking.csv and ranking_by_length.csv, the ranking's rows (`python -m reports.rank`,
reports/speedup_ranking.py): one row per operating point (domain or length bucket, batch size)
and mechanism at one D, ranked by speedup within its mode, with what its figures are (source,
runner, engine, dtype, model runner). Declared once here as records: the columns and their order
are the fields', and each row is checked against its record as it is built."""

from __future__ import annotations

import dataclasses
from typing import Any

from speclens.schema import AL, Count, DraftLength, Milliseconds, NonNegative, parse, record

RANKING_FILE = "ranking.csv"
LENGTH_RANKING_FILE = "ranking_by_length.csv"


@record(kw_only=True)
class RankingRow:
    """One entry of ranking.csv: a mechanism at one D (plain decoding: drafter none, d empty) at
    one operating point of one domain."""

    domain: str
    # The requests held in flight at once (the operating point).
    batch_size: Count
    drafter: str
    d: DraftLength | None
    # Filled once the rows are ranked: 1 the best of its table; entries whose measured ranges
    # overlap share a rank (`tie`).
    rank: Count | None = None
    speedup: NonNegative | None
    # What the speedup is: the run's source where measured (measured, fake, ...), else `predicted`
    # or `predicted (corrected)`, with `from <source>` where not from measured figures.
    speedup_source: str
    measured_speedup: NonNegative | None = None
    predicted_speedup: NonNegative | None = None
    predicted_lo: NonNegative | None = None
    predicted_hi: NonNegative | None = None
    # (predicted - measured) / measured, signed.
    speedup_gap: float | None = None
    gap_above_tolerance: bool = False
    al: AL | None = None
    tokens_per_step: NonNegative | None = None
    t_verif_ms: Milliseconds | None = None
    t_verif_spec_ms: Milliseconds | None = None
    # A measured T_draft can come out below zero where drafting costs less than the noise.
    t_draft_ms: float | None = None
    t_step_ms: Milliseconds | None = None
    draft_overhead: float | None = None
    output_tokens_per_s: NonNegative | None = None
    tokens_per_s_per_request: NonNegative | None = None
    # The drafters' facts table: what serving it holds, what training it costs.
    serve_memory: str
    training_cost: str
    run: str
    # Latency at the operating point (all prompts; runs that measured it): p50 in ms, and plain
    # decoding's p50 TPOT over this entry's.
    ttft_p50_ms: Milliseconds | None = None
    tpot_p50_ms: Milliseconds | None = None
    latency_speedup: NonNegative | None = None
    # The prediction times the corrections its operating point measured (speclens/figures/account.py), and range.
    predicted_corrected: NonNegative | None = None
    predicted_corrected_lo: NonNegative | None = None
    predicted_corrected_hi: NonNegative | None = None
    # With repeats: the measured speedup's range over them.
    speedup_lo: NonNegative | None = None
    speedup_hi: NonNegative | None = None
    tie: bool = False
    # The sampling temperature, the chat template's variables and the engine settings changed from
    # their defaults (reports/runs.py RecordView.template, .setting): entries are ranked only against
    # others in the same mode.
    temperature: NonNegative
    chat_template_kwargs: str
    setting: str
    # What the entry's figures are (speclens/provenance.py): measured, fake, ...; the engine's
    # runner, engine (vllm, sglang, trtllm, fake), dtype and model runner. Required and never null
    # (`unknown` where the run's record does not say): no row is without them.
    source: str
    runner: str
    engine: str
    dtype: str
    model_runner: str


@record(kw_only=True)
class LengthRankingRow:
    """One entry of ranking_by_length.csv: a mechanism at one D over one length bucket, ranked by
    that length's own speedup (a pass runs one length at a time)."""

    # The bucket's label and its prompts' length in tokens.
    length: str
    input_tokens: Count | None
    batch_size: Count
    drafter: str
    d: DraftLength | None
    rank: Count | None = None
    speedup: NonNegative | None
    speedup_source: str
    measured_speedup: NonNegative | None = None
    predicted_speedup: NonNegative | None = None
    al: AL | None = None
    al_ci95_lo: AL | None = None
    al_ci95_hi: AL | None = None
    tokens_per_step: NonNegative | None = None
    t_verif_ms: Milliseconds | None = None
    t_verif_spec_ms: Milliseconds | None = None
    t_draft_ms: float | None = None
    t_step_ms: Milliseconds | None = None
    output_tokens_per_s: NonNegative | None = None
    # The context extension an entry past the target's own window was measured under (else empty).
    context_extension: str | None = None
    run: str
    temperature: NonNegative
    chat_template_kwargs: str
    setting: str
    # Entries of one table with the same speedup share a rank (no repeats' ranges per length).
    tie: bool = False
    source: str
    runner: str
    engine: str
    dtype: str
    model_runner: str


def columns(kind: type) -> list[str]:
    """A ranking file's columns, in their order: its record's fields."""
    return [f.name for f in dataclasses.fields(kind)]


RANK_COLUMNS = columns(RankingRow)
LENGTH_RANK_COLUMNS = columns(LengthRankingRow)


def checked_rows(kind: type, rows: list[dict[str, Any]], file: str) -> list[dict[str, Any]]:
    """`rows` as their record declares them (every column, in order, defaults filled in); a row
    that breaks the declaration is a CorruptRecord naming the file, the field and the rule (its
    figures came from a damaged record)."""
    return [dataclasses.asdict(parse(kind, row, file, f"{kind.__name__} (row {i})")) for i, row in enumerate(rows)]
