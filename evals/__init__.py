"""The evaluation pipeline (plan, passes, measurement, replay, nightly, self-check), the prompt sets,
and the command-line entry points."""
