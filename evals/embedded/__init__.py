"""The embedded default target and its own drafters, built on this machine from PyPI wheels alone:
`target` (SmolLM2-135M-Instruct, dequantized once and cached) and `drafter_builds` (an EAGLE-3
head, a draft model and a parallel draft model, trained on the target's own answers). The
commands on them are `python -m evals.embedded_target` and `python -m evals.embedded_drafters`;
the pipeline builds what a run needs on first use."""
