"""The errors a user can fix, and the one boundary every command reports them through:
one line, `speclens: error: …`, exit status 2, never a traceback."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Callable, NoReturn

from speclens.text import terminal_safe


class SpeclensError(Exception):
    """A user-facing error: the message names the offending key and what to change."""


class ConfigError(SpeclensError):
    """Invalid configuration, detected before any engine starts."""


class TemplateFailed(ConfigError):
    """The target's chat template could not render a prompt's messages (the caller adds which)."""


class MeasurementError(SpeclensError):
    """A measurement that failed or whose numbers cannot be trusted (the engine died, the disk
    filled, records disagree with vLLM's counters)."""


class CorruptRecord(SpeclensError):
    """A record file (summary, stamp, parquet records) that is not what its name says: unreadable,
    or not the layout of any version speclens wrote."""


class AssetError(SpeclensError):
    """A file speclens fetches or prepares itself (a wheel member, the embedded target) could not be had."""


# Exit status of every speclens command (the README's table).
EXIT_OK = 0
EXIT_REGRESSION = 1  # evals.nightly found an AL regression
EXIT_USER_ERROR = 2  # bad input or configuration, refused before anything is measured
EXIT_MEASUREMENT = 3  # a measurement failed: engine crash, lost server, disk full, records that do not add up
EXIT_INTERRUPTED = 130


class ArgumentParser(argparse.ArgumentParser):
    """argparse for speclens's commands: a bad option or argument is a ConfigError, so `guarded`
    reports it in one line with exit status 2 (argparse's own prints its usage over two)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (`{self.prog} --help` lists its arguments).")


def _config_message(exc: BaseException) -> str | None:
    """One line for a Hydra/OmegaConf composition error (a bad override), None for anything else."""
    # Imported here: the foundation's other users (the step-cost model, benchmarks/gpu_step_cost.py
    # on a GPU machine with torch alone) need no Hydra.
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if isinstance(exc, MissingConfigException):
        missing = getattr(exc, "missing_cfg_file", None) or ""
        group, _, option = missing.rpartition("/")
        options = getattr(exc, "options", None)
        if group and options:
            return f"{group}={option} is unknown; choose one of {', '.join(options)}."
        return str(exc).splitlines()[0]
    cause = exc
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__
    if isinstance(cause, OmegaConfBaseException):
        first = str(cause).splitlines()[0]
        key = getattr(cause, "full_key", None)
        kind = getattr(cause, "object_type", None)
        if (
            isinstance(cause, (ConfigKeyError, ConfigAttributeError))
            and kind is not None
            and hasattr(kind, "__dataclass_fields__")
        ):
            keys = ", ".join(kind.__dataclass_fields__) or "none"
            return f"{key}: no such key in {kind.__name__} (its keys: {keys})."
        return f"{key}: {first}" if key else first
    if isinstance(exc, HydraException):
        return str(exc).splitlines()[0]
    return None


def user_message(exc: BaseException) -> str | None:
    """The one-line message for an error the user can fix; None for a bug (which keeps its traceback)."""
    if isinstance(exc, SpeclensError):
        # One line even where the message quotes a tool's output (a pip log tail).
        return " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    try:
        return _config_message(exc)
    except ImportError:
        return None


def exit_status(exc: BaseException) -> int:
    return EXIT_MEASUREMENT if isinstance(exc, MeasurementError) else EXIT_USER_ERROR


def report(message: str, status: int = EXIT_USER_ERROR) -> int:
    """Print an error the one way speclens commands do, on stderr; gives the exit status."""
    print(f"speclens: error: {terminal_safe(message)}", file=sys.stderr)
    return status


def guarded(main: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
    """Wrap a command's main(argv): an error the user can act on becomes one line and exit status 2
    (3 for a failed measurement); anything else is a bug and keeps its traceback."""

    @functools.wraps(main)
    def wrapper(argv: list[str]) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            print("speclens: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:  # noqa: BLE001 - a user error is reported; anything else re-raised
            message = user_message(exc)
            if message is None:
                raise
            return report(message, exit_status(exc))

    return wrapper
