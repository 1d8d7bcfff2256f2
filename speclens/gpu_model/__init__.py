"""The GPU model: what a speculative step costs on a GPU you name, and what that makes of the
acceptance speclens measures (docs/whatif.md).

- `model_shape`: a target's or drafter's architecture, from its config.json;
- `gpus`: the GPU table; `step_cost`: T_verif(B, D) on the roofline with fixed costs
  (`Efficiency`); `measured_ops`: aiconfigurator's measured GEMM and all-reduce tables in its place;
- `draft_cost`: T_draft(B, D) per mechanism;
- `whatif`: the predicted speedup at each operating point, from AL and the share of passes that
  draft; `model_error`: its error held out by published source, and the interval it prints;
- `calibrate`: the model fitted to a machine's measured step costs;
- `gpu_guidelines`: the draft-length guidelines on a GPU (from a config alone:
  speclens/config_guidelines.py).

It imports only the foundation's other modules; the commands on it are `evals.whatif`,
`evals.guidelines` and `reports.build --gpu`.
"""
