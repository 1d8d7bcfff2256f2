"""What a GPU run is stamped with (runners/gpu_facts.py) and the reproducibility hint a GPU run gets
(reports/table.py numerics_line): read from objects shaped as vLLM 0.32's CUDA worker holds them."""

from __future__ import annotations

import enum
from dataclasses import replace
from types import SimpleNamespace

from reports.table import numerics_line
from runners.gpu_facts import attention_backends, gpu_facts
from speclens.figures.summary import Numerics
from tests.unit.test_curves import sweep
from tests.unit.test_reproducibility import as_vllms


def backend(name: str):
    return SimpleNamespace(get_name=lambda: name)


def test_the_attention_backends_are_read_from_the_runners_groups():
    groups = [[SimpleNamespace(backend=backend("FLASH_ATTN"))], [SimpleNamespace(backend=backend("FLASHINFER"))]]
    runner = SimpleNamespace(attn_groups=groups + [[SimpleNamespace(backend=backend("FLASH_ATTN"))]])
    assert attention_backends(runner) == "FLASHINFER, FLASH_ATTN"
    assert attention_backends(SimpleNamespace()) is None  # a layout without groups: unknown


def test_a_cuda_device_is_described_with_its_kernels(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    mode = enum.Enum("CUDAGraphMode", "NONE FULL_AND_PIECEWISE").FULL_AND_PIECEWISE
    config = SimpleNamespace(compilation_config=SimpleNamespace(cudagraph_mode=mode))
    runner = SimpleNamespace(attn_groups=[[SimpleNamespace(backend=backend("FLASH_ATTN"))]])
    facts = gpu_facts(config, runner)
    assert {k: facts[k] for k in ("name", "count", "attention_backend", "cuda_graphs", "torch")} == {
        "name": "NVIDIA H100 80GB HBM3",
        "count": 2,
        "attention_backend": "FLASH_ATTN",
        "cuda_graphs": "FULL_AND_PIECEWISE",
        "torch": torch.__version__,
    }
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_facts(config, runner) is None  # the CPU build: no GPU facts


def test_a_gpu_run_is_pointed_to_batch_invariant_kernels_a_cpu_run_to_float32(tmp_path):
    from reports.runs import find_runs

    summary = as_vllms(find_runs(sweep(tmp_path, [("ngram", 2)]))[0].summary)
    summary = replace(summary, numerics=Numerics.of("bfloat16", 16, cpu="Intel Xeon (amx_bf16)"))
    assert numerics_line(summary).endswith("engine.dtype=float32 makes it reproducible")
    gpu = {"name": "NVIDIA H100 80GB HBM3", "count": 1}
    summary = replace(
        summary, numerics=Numerics.of("bfloat16", 16, cpu="Intel Xeon (amx_bf16)", model_runner="v2", gpu=gpu)
    )
    line = numerics_line(summary)
    assert "on 1x NVIDIA H100 80GB HBM3" in line and line.endswith("engine.batch_invariant=true makes it reproducible")
    invariant = replace(summary, numerics=Numerics.of("bfloat16", 16, batch_invariant=True, gpu=gpu))
    assert numerics_line(invariant) is None  # batch-invariant kernels: reproducible, nothing to say
