"""`python -m evals.quantize SOURCE [--scheme W8A8] [--out DIR]`: a quantized copy of a checkpoint
that vLLM's CPU build runs, to measure what quantizing a target or a draft model costs in AL.

SOURCE is a Hugging Face folder (a Llama-family causal LM: a target or a draft model; or an
EAGLE-3 head in the speculators format), or `target` / `draft_model` / `eagle3` for the
embedded SmolLM2 target and its embedded drafters.

The one scheme written is W8A8 int8 in the compressed-tensors format (what llm-compressor's
`oneshot(..., QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"]))` writes
without calibration data): each decoder Linear's weight rounded to int8 per output channel
(scale = the row's largest magnitude / 127), activations quantized per token at run time by vLLM;
embeddings, norms and lm_head kept as they are. It is the only weight format vLLM 0.32's CPU build
runs on an AVX2 host at full speed (docs/usage.md, "Quantized drafters and targets"). Other
formats are refused in one line naming the engine that runs them.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from speclens.assets import building
from speclens.checkpoints import read_config
from speclens.errors import ArgumentParser, ConfigError, guarded
from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE
from speclens.files import output_path
from speclens.model_facts import ModelFacts

SCHEMES = ("W8A8",)
# Formats users ask for that vLLM 0.32's CPU build does not run here, and where they run.
ELSEWHERE = {
    "W4A16": "int4 weights need cpu_gemm_wna16, which the CPU build's AVX2 kernels lack; vLLM's CUDA build runs them",
    "W4A8": "int4 weights need cpu_gemm_wna16, which the CPU build's AVX2 kernels lack; vLLM's CUDA build runs them",
    "GPTQ": "int4 weights need cpu_gemm_wna16, which the CPU build's AVX2 kernels lack; vLLM's CUDA build runs them",
    "AWQ": "int4 weights need cpu_gemm_wna16, which the CPU build's AVX2 kernels lack; vLLM's CUDA build runs them",
    "FP8": "the CPU build's static_scaled_fp8_quant is a stub; vLLM's CUDA build runs FP8 weights (Ada, Hopper or newer)",
    "NVFP4": "it needs Marlin or CUTLASS FP4 kernels: vLLM's CUDA build on NVIDIA GPUs (Blackwell natively)",
}
# The Linear layers of a Llama-family decoder layer: what is quantized.
# A decoder's Linear layers, and an EAGLE-3 head's `fc` (vLLM builds it with the head's
# quantization config, so a float `fc` beside this config would be read as int8).
QUANTIZED = re.compile(r"(^|\.)(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|fc)\.weight$")
INT8_MAX = 127
# compressed-tensors' description of W8A8 (its field set as compressed-tensors 0.17 writes it).
QUANT_ARGS = {"actorder": None, "block_structure": None, "group_size": None, "num_bits": 8, "observer_kwargs": {}}
QUANTIZATION_CONFIG: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "format": "int-quantized",
            "targets": ["Linear"],
            "weights": QUANT_ARGS
            | {
                "dynamic": False,
                "observer": "memoryless_minmax",
                "strategy": "channel",
                "symmetric": True,
                "type": "int",
            },
            "input_activations": QUANT_ARGS
            | {"dynamic": True, "observer": None, "strategy": "token", "symmetric": True, "type": "int"},
            "output_activations": None,
        }
    },
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "sparsity_config": {},
    "transform_config": {},
    "version": "0.17.0",
}


def check_scheme(scheme: str) -> None:
    name = scheme.upper()
    if name in SCHEMES:
        return
    if name in ELSEWHERE:
        raise ConfigError(f"--scheme {scheme}: vLLM's CPU build does not run it here: {ELSEWHERE[name]}.")
    raise ConfigError(f"--scheme {scheme}: choose one of {', '.join(SCHEMES)}.")


def quantize_w8a8(weight):
    """(int8 weight, float32 per-row scale of shape [rows, 1]): weight ≈ int8 · scale, each
    element within half a scale step."""
    import torch

    w = weight.to(torch.float32)
    scale = w.abs().amax(dim=1, keepdim=True) / INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row stays zero
    q = torch.round(w / scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def source_dir(source: str) -> Path:
    if source == "target":
        from evals.embedded.target import ensure_smollm2

        return ensure_smollm2()
    if source in ("draft_model", "eagle3"):
        from evals.embedded.drafter_builds import ensure_drafter

        return ensure_drafter(source)
    folder = Path(source)
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"{source}: no config.json in it; give a Hugging Face folder, `target`, `draft_model` or `eagle3`."
        )
    return folder


def write_quantized(src: Path, out: Path) -> int:
    """The W8A8 copy of `src` into `out` (built aside, moved into place whole); returns how many
    weights were quantized."""
    from safetensors.torch import load_file, save_file

    config = read_config(src, "source")
    already = ModelFacts.from_config(str(src), config).quantization
    if already:
        raise ConfigError(f"{src} is quantized already ({already}).")
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{src}: no .safetensors weights in it.")
    with building(out) as tmp:
        quantized = 0
        for file in files:
            tensors = load_file(file)
            written = {}
            for name, tensor in tensors.items():
                if QUANTIZED.search(name) and tensor.dim() == 2 and tensor.is_floating_point():
                    written[name], written[name + "_scale"] = quantize_w8a8(tensor)
                    quantized += 1
                else:
                    written[name] = tensor
            save_file(written, tmp / file.name, metadata={"format": "pt"})
        if not quantized:
            raise ConfigError(f"{src}: no Llama-family decoder Linear weights (q_proj … down_proj, fc) to quantize.")
        # the tokenizer and generation config come along; a speclens build's facts do not (they
        # describe the unquantized weights)
        for other in src.iterdir():
            if (
                other.is_file()
                and other.suffix != ".safetensors"
                and other.name not in ("config.json", DRAFTER_FACTS_FILE)
            ):
                shutil.copy2(other, tmp / other.name)
        config["quantization_config"] = QUANTIZATION_CONFIG
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return quantized


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m evals.quantize", description=__doc__.splitlines()[0])
    parser.add_argument(
        "source", help="a Hugging Face folder, or `target`, `draft_model`, `eagle3` (the embedded ones)"
    )
    parser.add_argument("--scheme", default="W8A8", help="W8A8 (int8 weights and activations)")
    parser.add_argument("--out", help="where to write it (default: beside the source, <name>-w8a8)")
    args = parser.parse_args(argv)
    check_scheme(args.scheme)
    src = source_dir(args.source)
    # (empty, under a file, a name too long, an unwritable parent: one line, before any work)
    out = output_path(src.with_name(f"{src.name}-{args.scheme.lower()}") if args.out is None else args.out, "--out")
    if out.exists():
        raise ConfigError(f"--out {out} exists; remove it or give another --out.")
    count = write_quantized(src, out)
    print(f"speclens quantize: {count} weights of {src} as {args.scheme} int8 into {out}")
    key = "target.model" if args.source == "target" else "drafter.model"
    print(f"measure it with `python -m evals.run ... {key}={out}`, and the original with {key}={src}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
