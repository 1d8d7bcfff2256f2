"""The step-cost model: how long one forward pass takes on a GPU, term by term, and what drafting
costs, from the model's shapes (speclens/gpu_model/model_shape.py) and the GPU's datasheet (speclens/gpu_model/gpus.py).

A verification step of B requests with q = 1 + D query tokens each, every request holding L tokens
of context, on one of TP GPUs (tensor parallel):

- **GEMMs**: the weights read once per step (MoE: the experts B·q tokens route to, uniformly, in
  expectation, at the experts' stored width) against 2 · active parameters · B·q FLOPs;
- **attention**: per request and KV head, its query rows G·q padded to 128-row tiles; each tile
  reads the request's L cached tokens of that head (a windowed layer: at most its window)
  and does 4 · 128 · L · head_dim FLOPs (QKᵀ and PV). While G·q stays inside one tile, more drafts
  cost nothing here (guidelines 2 and 3);
- **communication**: two all-reduces of B·q hidden vectors per layer across the TP GPUs (ring: 2 ·
  (TP − 1)/TP of the bytes over one direction of the link), each with a fixed latency;
- **overhead**: a fixed cost per forward pass (scheduling, launches), one per MoE layer (routing,
  token permutation, the grouped expert GEMMs' launch, beyond their weight reads), and a cost per
  token the target processes (input preparation, sampling, the small kernels outside GEMMs and
  attention whose work grows with the tokens): a step of B·q tokens is never free, where the
  roofline terms alone stay flat until the GEMMs turn compute-bound.

Each of the first two is max(bytes / (η_mem · bandwidth), FLOPs / (η_compute · peak)); the step is
their sum with the other two, and its `bound` names the largest term (`weights`, `kv`, `compute`,
`communication`, `overhead`; `draft` where drafting costs more than any).

Efficiencies and overheads (Efficiency) are one set of defaults for every GPU (docs/whatif.md says
where each comes from, and how far they carry on published figures, held out by source); `eff.<field>=`
overrides them (and widens every interval: speclens/gpu_model/model_error.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from speclens.errors import ConfigError
from speclens.gpu_model.gpus import Gpu
from speclens.gpu_model.measured_ops import MeasuredOps
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.serving_engines import ServingEngine
from speclens.options import number

TILE_ROWS = 128
KV_BYTES = 2  # bf16 KV cache
ACTIVATION_BYTES = 2  # bf16 all-reduce payloads
WEIGHT_BYTES = {"bf16": 2, "fp8": 1, "nvfp4": 0.5625, "mxfp4": 0.53125}  # FP4: 4 bits + a scale per 16 / 32
DENSE_WEIGHTS = ("bf16", "fp8")  # `weights=`: attention, dense MLPs, embeddings (FP4 only for experts)


@dataclass(frozen=True)
class Efficiency:
    mem: float = 0.80  # share of HBM bandwidth a decode kernel reaches
    compute: float = 0.70  # share of dense tensor throughput a GEMM or attention tile reaches
    link: float = 0.80  # share of one direction of the link an all-reduce reaches
    allreduce_us: float = 8.0  # fixed latency of one all-reduce call
    # overhead_ms and token_us: SpecDecode-Bench's fit of vLLM's step time on an H100 (absolute
    # steps; speedups leave them free). draft_pass_overhead_ms: fitted on the published speedups by
    # speclens/gpu_model/model_error.py `fit`, all sources (held out by source: median |error| 15.6 %,
    # worst 42.6 %; in-sample 15.6 %, 42.1 %); tests/unit/test_nested_intervals.py keeps them equal.
    overhead_ms: float = 1.2  # per target forward pass (scheduling, launches, sampling)
    token_us: float = 15.0  # per token a target forward processes, outside its GEMMs and attention
    draft_pass_overhead_ms: float = 0.44  # per serial pass of a drafter
    lookup_us_per_request: float = 10.0  # n-gram / suffix lookup on the host, per request and step
    moe_layer_us: float = 20.0  # per MoE layer and forward: routing, permutation, grouped-GEMM launch
    # The K=0 tax: what a step that drafts nothing costs beyond a plain one with speculation on
    # (Model Runner V1), per step and per request. 0 on a GPU of the table (never measured there);
    # `calibrate=` fits it to the machine's T_idle (speclens/gpu_model/calibrate.py fit_tax).
    k0_tax_ms: float = 0.0
    k0_tax_us_per_request: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("mem", "compute", "link"):
                number(value, f"eff.{f.name}", above=0, at_most=1)  # a share of a peak
            else:
                number(value, f"eff.{f.name}", at_least=0)


@dataclass(frozen=True)
class Terms:
    """One forward pass's terms, in milliseconds, with what bounds each of the first two."""

    gemm_ms: float
    gemm_bound: str  # "weights" or "compute"
    attention_ms: float
    attention_bound: str  # "kv" or "compute"
    communication_ms: float
    overhead_ms: float

    @property
    def total_ms(self) -> float:
        return self.gemm_ms + self.attention_ms + self.communication_ms + self.overhead_ms

    def parts(self) -> dict[str, float]:
        """Milliseconds by what bounds them (`weights`, `kv`, `compute`, `communication`, `overhead`)."""
        parts = {self.gemm_bound: self.gemm_ms, "communication": self.communication_ms, "overhead": self.overhead_ms}
        parts[self.attention_bound] = parts.get(self.attention_bound, 0.0) + self.attention_ms
        return parts

    def bound(self) -> str:
        parts = self.parts()
        return max(parts, key=parts.get)


@dataclass(frozen=True)
class Hardware:
    gpu: Gpu
    tp: int = 1
    weights: str = "bf16"
    eff: Efficiency = Efficiency()
    # the experts' format (any of WEIGHT_BYTES); None: the checkpoint's (ModelShape.expert_weights), else `weights`
    expert_weights: str | None = None
    # GPU attention kernels pad each KV head's query rows to 128-row tiles; None: kernels that
    # compute the real rows and read the KV cache once (a CPU's, as a calibration finds them)
    tile_rows: int | None = TILE_ROWS
    # cost_model=aiconfigurator: the target's GEMMs and all-reduces as measured (speclens/gpu_model/measured_ops.py)
    ops: MeasuredOps | None = field(default=None, compare=False)
    # the serving engine's behaviour under speculation (speclens/gpu_model/serving_engines.py); None: the
    # fitted overheads as they are (a calibrated machine's, the published cases' scoring)
    engine: ServingEngine | None = None

    def __post_init__(self) -> None:
        if self.weights not in DENSE_WEIGHTS:
            raise ConfigError(f"weights={self.weights}: choose one of {', '.join(DENSE_WEIGHTS)}.")
        if self.expert_weights is not None and self.expert_weights not in WEIGHT_BYTES:
            raise ConfigError(f"expert_weights={self.expert_weights}: choose one of {', '.join(WEIGHT_BYTES)}.")
        if self.tp < 1:
            raise ConfigError(f"tp={self.tp}: at least 1.")
        self.gpu.peak_tflops(self.weights)  # no FP8 on the GPU: refused here

    def plain_against(self, drafter: str) -> "Hardware":
        """The hardware of the plain step a drafter's steps are compared against (the engine's overlap)."""
        return self if self.engine is None else replace(self, eff=self.engine.plain_efficiency(self.eff, drafter))

    def drafting(self, drafter: str) -> "Hardware":
        """The hardware of a drafter's passes (the engine's in-graph drafting)."""
        return self if self.engine is None else replace(self, eff=self.engine.drafting_efficiency(self.eff, drafter))

    def mem_ms(self, nbytes: float) -> float:
        return nbytes / (self.eff.mem * self.gpu.hbm_tb_s * 1e12) * 1e3

    def compute_ms(self, flops: float, tensor_tflops: float | None = None) -> float:
        peak = tensor_tflops if tensor_tflops is not None else self.gpu.peak_tflops(self.weights)
        return flops / (self.eff.compute * peak * 1e12) * 1e3


def check_tp(shape: ModelShape, tp: int, where: str = "the target") -> None:
    if shape.heads % tp:
        raise ConfigError(f"tp={tp} does not divide {where}'s {shape.heads} attention heads.")
    if not shape.mla and shape.kv_heads % tp and tp % shape.kv_heads:
        raise ConfigError(f"tp={tp} and {where}'s {shape.kv_heads} KV heads: neither divides the other.")


def experts_touched(experts: int, per_token: int, tokens: int) -> float:
    """The expected number of distinct experts `tokens` tokens route to, each picking `per_token`
    of `experts` uniformly: experts · (1 − (1 − k/E)^T)."""
    if experts == 0 or tokens == 0:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def expert_format(shape: ModelShape, hw: Hardware) -> str:
    """The experts' format: `expert_weights=` where given, else the checkpoint's, else `weights=`."""
    return hw.expert_weights or shape.expert_weights or hw.weights


def expert_bytes(shape: ModelShape, hw: Hardware) -> float:
    return WEIGHT_BYTES[expert_format(shape, hw)]


def weight_bytes(shape: ModelShape, tokens: int, hw: Hardware) -> float:
    """The weight bytes one forward of `tokens` tokens reads (all GPUs together)."""
    touched = experts_touched(shape.experts, shape.experts_per_token, tokens)
    experts = shape.moe_layers * touched * shape.expert_params
    return shape.dense_params() * WEIGHT_BYTES[hw.weights] + experts * expert_bytes(shape, hw)


def gemm_term(shape: ModelShape, tokens: int, hw: Hardware) -> tuple[float, str]:
    memory = hw.mem_ms(weight_bytes(shape, tokens, hw) / hw.tp)
    compute = hw.compute_ms(2.0 * shape.active_params() * tokens / hw.tp)
    bound = "weights" if memory >= compute else "compute"
    if hw.ops is not None and measurable(shape):
        return measured_gemms_ms(shape, tokens, hw), bound  # the time measured, the bound the roofline's
    return max(memory, compute), bound


def measurable(shape: ModelShape) -> bool:
    """Dense GQA targets: their GEMMs are four per layer and the LM head (MoE routing and MLA's
    projections stay on the roofline)."""
    return not shape.experts and not shape.mla


def gemm_shapes(shape: ModelShape, tp: int) -> list[tuple[int, int, int]]:
    """(n, k, count) of the target's GEMMs per forward, each GPU's share under tensor parallelism."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    return [
        ((q + 2 * kv) // tp, shape.hidden, shape.layers),  # QKV
        (shape.hidden, q // tp, shape.layers),  # O
        (2 * shape.intermediate // tp, shape.hidden, shape.layers),  # gate and up
        (shape.hidden, shape.intermediate // tp, shape.layers),  # down
        (shape.vocab // tp, shape.hidden, 1),  # LM head
    ]


def measured_gemms_ms(shape: ModelShape, tokens: int, hw: Hardware) -> float:
    assert hw.ops is not None
    return sum(count * hw.ops.gemm_ms(tokens, n, k, hw.weights) for n, k, count in gemm_shapes(shape, hw.tp))


def attention_tiles(g: int, queries_per_request: int, tile_rows: int = TILE_ROWS) -> int:
    """128-row tiles one KV head's query rows (G · q) fill."""
    return math.ceil(g * queries_per_request / tile_rows)


def attention_term(shape: ModelShape, batch: int, queries: int, context: int, hw: Hardware) -> tuple[float, str]:
    """Attention of `batch` requests, `queries` query tokens each, over `context` cached tokens."""
    if shape.mla:
        kv_heads, g = 1, shape.heads // hw.tp  # the latent is read whole on every GPU
        per_token = shape.head_dim * KV_BYTES
    else:
        kv_heads = max(1, shape.kv_heads // hw.tp)
        g = shape.heads // hw.tp // kv_heads
        per_token = 2 * shape.head_dim * KV_BYTES  # K and V
    if hw.tile_rows is None:
        reads, rows = 1, g * queries
    else:
        tiles = attention_tiles(g, queries, hw.tile_rows)
        reads, rows = tiles, tiles * hw.tile_rows
    attended = shape.attended_tokens(context)  # over every layer; sliding-window layers read their window
    nbytes = batch * kv_heads * reads * attended * per_token
    flops = batch * kv_heads * 4.0 * rows * attended * shape.head_dim
    memory, compute = hw.mem_ms(nbytes), hw.compute_ms(flops, hw.gpu.bf16_tflops)
    return (memory, "kv") if memory >= compute else (compute, "compute")


def communication_term(shape: ModelShape, tokens: int, hw: Hardware) -> float:
    if hw.tp == 1:
        return 0.0
    if hw.ops is not None:
        return 2 * shape.layers * hw.ops.allreduce_ms(tokens * shape.hidden, hw.tp)
    payload = tokens * shape.hidden * ACTIVATION_BYTES
    one_direction = hw.eff.link * hw.gpu.link_gb_s / 2 * 1e9
    per_call_ms = hw.eff.allreduce_us / 1e3 + 2 * (hw.tp - 1) / hw.tp * payload / one_direction * 1e3
    return 2 * shape.layers * per_call_ms


def forward(shape: ModelShape, batch: int, queries: int, context: int, hw: Hardware, overhead_ms: float) -> Terms:
    """One forward pass of `batch` requests with `queries` new tokens each over `context` cached ones."""
    tokens = batch * queries
    gemm, gemm_bound = gemm_term(shape, tokens, hw)
    attention, attention_bound = attention_term(shape, batch, queries, context, hw)
    overhead_ms += shape.moe_layers * hw.eff.moe_layer_us / 1e3
    return Terms(gemm, gemm_bound, attention, attention_bound, communication_term(shape, tokens, hw), overhead_ms)


def verify_step(shape: ModelShape, batch: int, d: int, context: int, hw: Hardware) -> Terms:
    """T_verif(B·(1+D)): the target's forward over each request's last token and its D drafts
    (d = 0: a plain decoding step, T_verif(B))."""
    overhead = hw.eff.overhead_ms + hw.eff.token_us * batch * (1 + d) / 1e3
    return forward(shape, batch, 1 + d, context, hw, overhead)


def memory_needed_gb(shape: ModelShape, batch: int, context: int, d: int, hw: Hardware) -> float:
    """Weights and KV cache per GPU for `batch` requests of `context` tokens (+ D draft slots)."""
    experts = shape.moe_layers * shape.experts * shape.expert_params
    weights = ((shape.total_params() - experts) * WEIGHT_BYTES[hw.weights] + experts * expert_bytes(shape, hw)) / hw.tp
    kv_share = 1 if shape.mla else hw.tp  # MLA's latent is replicated across TP ranks
    kv = shape.kv_bytes_per_layer_token(KV_BYTES) * shape.attended_tokens(context + d) * batch / kv_share
    return (weights + kv) / 1e9
