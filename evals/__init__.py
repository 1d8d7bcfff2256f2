"""The evaluation pipeline (plan, passes, measurement, replay, nightly, self-check), the prompt sets,
and the command-line entry points."""

from speclens.packages import check_own_packages

check_own_packages()
