"""A run's figures, each defined once, and the summary that holds them (docs/definitions.md).

- `metrics`: every acceptance figure over the per-step records (AL, tokens per target step,
  per-position acceptance, their intervals and splits by domain, turn, segment and length);
- `acceptance`: AL at every D from one per-position profile;
- `costs`: what verifying and drafting cost at an operating point, from the engine's steps;
- `account`: where a measured speedup parts from the predicted one; `latency`: TTFT, TPOT, ITL;
- `peer_figures`: other tools' figures for the same run, each by its own formula;
- `diagnostics`: what is odd about a run, with its evidence;
- `summary`: summary.json and replay.json as typed records, with the one reader and its migrations.

It imports only the foundation's other modules; the pipeline's `evals/pipeline/summarise.py`
computes a summary from a run's passes, and every report reads one.
"""
