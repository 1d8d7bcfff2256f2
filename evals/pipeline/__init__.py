"""The measurement pipeline under `python -m evals.run` and `python -m evals.replay`, in the
order a run goes through it:

- `compose`: the Hydra config composed and typed (`RunConfig`); `run_dir`: the run dir claimed,
  staged and finished whole;
- `plan`: every input resolved and checked before an engine starts (with `capacity`: context
  window and KV cache; `kv_cache`: the cache dtype; `verify`: the verify method; `synthetic`:
  acceptance.synthetic; `reasoning`: where thinking ends);
- `passes`: the engine passes at each batch size (`conversation`: multi-turn requests);
- `measure`: a run from its plan to its records and summary (`stamp`: stamp.json);
- `summarise`: the summary's figures from the passes.

The commands on it stay `evals/<command>.py` (the `python -m evals.<command>` surfaces).
"""
