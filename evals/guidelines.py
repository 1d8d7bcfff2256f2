"""`python -m evals.guidelines target=<name> | target.model=<path> [drafter.model=<path>]
[gpu=<name> [tp=N] [weights=bf16|fp8] [expert_weights=…] [batch_sizes=[…]] [context_len=N]]`: the draft-length
guidelines (speclens/config_guidelines.py) computed from the target's (and the draft's) config; with
gpu=, also for that GPU from the step-cost model (speclens/gpu_model/gpu_guidelines.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from evals.pipeline.compose import compose_config, to_run_config
from evals.pipeline.plan import resolve_target
from evals.whatif_inputs import check_pair
from speclens import checkpoints
from speclens.config_guidelines import Guidelines
from speclens.config_guidelines import __doc__ as guidelines_doc
from speclens.errors import ConfigError, guarded
from speclens.model_facts import text_config
from speclens.options import parse_value

GPU_KEYS = ("gpu", "tp", "weights", "expert_weights", "batch_sizes", "context_len")


def _split_args(argv: list[str]) -> tuple[list[str], str | None, dict[str, str]]:
    overrides, draft, gpu = [], None, {}
    for arg in argv:
        key = arg.split("=", 1)[0]
        if key in GPU_KEYS or key.startswith(("gpu.", "eff.")):
            gpu[key] = arg.split("=", 1)[1] if "=" in arg else ""
        elif arg.startswith("drafter.model="):
            draft = arg.split("=", 1)[1]
        elif arg.startswith("drafter"):
            raise ConfigError(f"{arg}: only drafter.model=<path> is read here (its config gives L_draft).")
        else:
            overrides.append(arg)
    return overrides, draft, gpu


def draft_mechanism(draft_config: dict | None) -> str:
    """A draft model where drafter.model= names one (no draft vocabulary), else an EAGLE-3 head."""
    return "draft_model" if draft_config is not None and not draft_config.get("draft_vocab_size") else "eagle3"


def gpu_lines(settings: dict[str, str], target_config: dict, draft_config: dict | None) -> list[str]:
    """The guidelines for the GPU `settings` name, from the step-cost model."""
    from evals.whatif import hardware_from
    from evals.whatif_inputs import ints
    from speclens.gpu_model.draft_cost import drafter_shape
    from speclens.gpu_model.gpu_guidelines import free_verification_limit, low_latency_break_even, verify_knees
    from speclens.gpu_model.model_shape import shape_of
    from speclens.gpu_model.step_cost import check_tp, memory_needed_gb
    from speclens.gpu_model.whatif import DEFAULT_BATCH_SIZES, check_fits

    if "gpu" not in settings:
        raise ConfigError("give gpu=<name> with the GPU settings (tp=, weights=, batch_sizes=, context_len=).")
    hw = hardware_from(settings)
    shape = shape_of(target_config, "target.model")
    check_tp(shape, hw.tp)
    batch_sizes = ints(
        parse_value(settings.get("batch_sizes", "null"), "batch_sizes") or DEFAULT_BATCH_SIZES, "batch_sizes"
    )
    context = ints(parse_value(settings.get("context_len", "4096"), "context_len"), "context_len")[0]
    check_fits(hw, memory_needed_gb(shape, 1, context, 0, hw), 1, context)  # guidelines for a GPU it fits
    ds = [1, 2, 3, 4, 5, 7, 15, 31]
    out = [f"on {hw.gpu.name} (tp={hw.tp}, weights={hw.weights}, context {context} tokens; the step-cost model):"]
    limits = ", ".join(
        f"D={d}: B={b}"
        if (b := free_verification_limit(shape, hw, d, batch_sizes, context))
        else f"D={d}: free to B={max(batch_sizes)}"
        for d in ds
    )
    out.append(f"guideline 1: verification stops being free (T_verif(B*(1+D)) / T_verif(B) > 1.1) at {limits}")
    for b in (1, max(batch_sizes)):
        knees = verify_knees(shape, hw, b, context, 64)
        shown = ", ".join(map(str, knees[:6])) or "none up to D=64"
        out.append(f"guidelines 2-3 at B={b}: T_verif steps up after D = {shown}")
    mechanism = draft_mechanism(draft_config)
    draft = drafter_shape(mechanism, shape, draft_config)
    rho, pays = low_latency_break_even(mechanism, shape, draft, hw, context, [1, 3, 7])
    what = "the EAGLE-3 head" if mechanism == "eagle3" else "the draft model"
    out.append(f"guideline 4 ({what}): rho = T_draft(1,1) / T_verif(1) = {rho:.3f}")
    out += [f"  D={p.d:<3d} pays at B=1 only when AL > {p.break_even_al:.2f}" for p in pays]
    return out


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__ + "\n" + guidelines_doc)
        return 0
    overrides, draft, gpu = _split_args(argv)
    cfg = to_run_config(compose_config(["drafter=none", *overrides]))
    target_dir = resolve_target(cfg)
    target_config = checkpoints.read_config(target_dir, "target.model")
    draft_config = None
    if draft is not None:
        draft_dir = checkpoints.resolve(draft, "drafter.model")
        draft_config = checkpoints.read_config(draft_dir, "drafter.model")
        # what evals.run refuses of this pair (another vocabulary, a head of another target), refused here
        check_pair(draft_mechanism(draft_config), 1, str(target_dir), target_config, str(draft_dir), draft_config)
    guidelines = Guidelines.for_configs(target_config, draft_config)
    on_gpu = gpu_lines(gpu, target_config, draft_config) if gpu else []  # refused before anything is printed
    text = text_config(target_config)
    print(
        f"target: {Path(target_dir)} ({', '.join(target_config.get('architectures') or ['?'])}, "
        f"{text.get('num_hidden_layers')} layers, {text.get('num_attention_heads')} query heads / "
        f"{text.get('num_key_value_heads') or text.get('num_attention_heads')} KV heads)"
    )
    print("\n".join(guidelines.lines()))
    if on_gpu:
        print("\n".join(on_gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
