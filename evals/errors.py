"""The one exception type for problems a user can fix (bad config, missing files)."""


class SpeclensError(Exception):
    """A user-facing error: the message names the offending key and what to change."""


class ConfigError(SpeclensError):
    """Invalid configuration, detected before any engine starts."""


class MeasurementError(SpeclensError):
    """A run whose numbers cannot be trusted (e.g. records disagree with vLLM's counters)."""
