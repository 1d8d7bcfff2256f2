"""The step-cost model's two big terms checked on the GPU this runs on: one decoder layer's GEMMs
and its attention, timed with torch alone, against speclens/gpu_model/step_cost.py's prediction.

For each (B, D, L) of a small grid: the layer's four GEMMs (QKV, O, gate-up, down) over B·(1+D)
tokens, and attention of 1+D query tokens per sequence over a KV cache of L tokens (PyTorch SDPA,
which dispatches to FlashAttention or memory-efficient kernels on CUDA). Prints measured / predicted
per term (a ratio of 1 is the model right; the model's efficiencies are its defaults).

    python benchmarks/gpu_step_cost.py [--gpu h100_sxm] [--layer llama-3.1-8b] [--reps 20]
    python benchmarks/gpu_step_cost.py --device cpu --layer tiny --reps 3   # a smoke run, no GPU

Needs torch and this repository on the path (no vLLM, no Hydra): under 8 minutes on an H100-class GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speclens.gpu_model.gpus import GPUS, gpu_named  # noqa: E402
from speclens.gpu_model.model_shape import ModelShape  # noqa: E402
from speclens.gpu_model.step_cost import Hardware, attention_term, gemm_term  # noqa: E402

LAYERS = {  # hidden, heads, KV heads, head_dim, intermediate
    "llama-3.1-8b": (4096, 32, 8, 128, 14336),
    "llama-3.1-70b": (8192, 64, 8, 128, 28672),
    "tiny": (256, 8, 2, 32, 1024),
}
GRID = {
    "cuda": [(b, d, ctx) for b in (1, 16, 64) for d in (0, 3, 7, 31) for ctx in (2048, 16384)],
    "cpu": [(b, d, ctx) for b in (1, 4) for d in (0, 3) for ctx in (256,)],
}
# GPU names as torch reports them -> the table's
NAMES = {
    "H100": "h100_sxm",
    "H200": "h200_sxm",
    "B200": "b200",
    "GB200": "gb200",
    "L40S": "l40s",
    "A100": "a100_sxm_80gb",
}


def one_layer(hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int) -> ModelShape:
    attention = hidden * heads * head_dim * 2 + 2 * hidden * kv_heads * head_dim
    return ModelShape(
        layers=1,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=0,  # the layer alone: no LM head
        tied_embeddings=True,
        intermediate=intermediate,
        attention_params=attention,
    )


def timed(fn, device: str, reps: int) -> float:
    """Median milliseconds of `fn` over `reps` runs after two warm-ups."""
    import torch

    for _ in range(2):
        fn()
    samples = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main(argv: list[str]) -> None:
    import torch
    import torch.nn.functional as F

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--gpu", choices=list(GPUS), help="the table's GPU to predict for (default: detected)")
    parser.add_argument("--layer", choices=list(LAYERS), default=None)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    device = args.device
    layer = args.layer or ("llama-3.1-8b" if device == "cuda" else "tiny")
    hidden, heads, kv_heads, head_dim, intermediate = LAYERS[layer]
    shape = one_layer(hidden, heads, kv_heads, head_dim, intermediate)
    if device == "cuda":
        detected = torch.cuda.get_device_name()
        name = args.gpu or next((v for k, v in NAMES.items() if k in detected), None)
        if name is None:
            raise SystemExit(f"gpu_step_cost: {detected} is not in speclens's table; give --gpu")
        dtype = torch.bfloat16
    else:  # a smoke run: the prediction is for the named (or first) GPU, the ratio means nothing
        detected, name, dtype = "cpu", args.gpu or next(iter(GPUS)), torch.float32
    hw = Hardware(gpu_named(name))
    print(f"device: {detected}; predicted for {name}; layer {layer} (hidden {hidden}, {heads}/{kv_heads} heads)")
    weights = {
        "qkv": torch.randn(hidden, (heads + 2 * kv_heads) * head_dim, device=device, dtype=dtype),
        "o": torch.randn(heads * head_dim, hidden, device=device, dtype=dtype),
        "gate_up": torch.randn(hidden, 2 * intermediate, device=device, dtype=dtype),
        "down": torch.randn(intermediate, hidden, device=device, dtype=dtype),
    }
    print(f"{'B':>4} {'D':>3} {'L':>6}  gemm ms (measured/predicted)  attention ms (measured/predicted)")
    for b, d, context in GRID[device]:
        tokens = b * (1 + d)
        x = torch.randn(tokens, hidden, device=device, dtype=dtype)
        h = torch.randn(tokens, heads * head_dim, device=device, dtype=dtype)
        u = torch.randn(tokens, intermediate, device=device, dtype=dtype)

        def gemms(x=x, h=h, u=u):
            x @ weights["qkv"]
            h @ weights["o"]
            x @ weights["gate_up"]
            u @ weights["down"]

        q = torch.randn(b, heads, 1 + d, head_dim, device=device, dtype=dtype)
        k = torch.randn(b, kv_heads, context, head_dim, device=device, dtype=dtype)
        v = torch.randn(b, kv_heads, context, head_dim, device=device, dtype=dtype)

        def attention(q=q, k=k, v=v):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

        gemm_ms, attention_ms = timed(gemms, device, args.reps), timed(attention, device, args.reps)
        gemm_pred, gemm_bound = gemm_term(shape, tokens, hw)
        attention_pred, attention_bound = attention_term(shape, b, 1 + d, context, hw)
        print(
            f"{b:>4} {d:>3} {context:>6}  {gemm_ms:9.4g} / {gemm_pred:9.4g} = {gemm_ms / gemm_pred:6.3g} ({gemm_bound})"
            f"  {attention_ms:9.4g} / {attention_pred:9.4g} = {attention_ms / attention_pred:6.3g} ({attention_bound})"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
