"""The one exception type for problems a user can fix (bad config, missing files)."""


class SpeclensError(Exception):
    """A user-facing error: the message names the offending key and what to change."""


class ConfigError(SpeclensError):
    """Invalid configuration, detected before any engine starts."""


class MeasurementError(SpeclensError):
    """A run whose numbers cannot be trusted (e.g. records disagree with vLLM's counters)."""


# Exit status of every speclens command that stops on a SpeclensError.
EXIT_USER_ERROR = 2


def report(exc: SpeclensError) -> int:
    """Print `exc` the one way speclens commands do, on stderr; gives the exit status."""
    import sys

    print(f"speclens: error: {exc}", file=sys.stderr)
    return EXIT_USER_ERROR
