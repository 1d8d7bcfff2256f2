"""`python -m evals.guidelines target=<name> | target.model=<path> [drafter.model=<path>]`:
the draft-length guidelines (speclens/guidelines.py) computed from the target's (and the draft's) config."""

from __future__ import annotations

import sys
from pathlib import Path

from evals.compose import compose_config, to_run_config
from evals.plan import resolve_target
from speclens import checkpoints
from speclens.errors import ConfigError, guarded
from speclens.guidelines import Guidelines
from speclens.guidelines import __doc__ as guidelines_doc
from speclens.model_facts import text_config


def _split_args(argv: list[str]) -> tuple[list[str], str | None]:
    overrides, draft = [], None
    for arg in argv:
        if arg.startswith("drafter.model="):
            draft = arg.split("=", 1)[1]
        elif arg.startswith("drafter"):
            raise ConfigError(f"{arg}: only drafter.model=<path> is read here (its config gives L_draft).")
        else:
            overrides.append(arg)
    return overrides, draft


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__ + "\n" + guidelines_doc)
        return 0
    overrides, draft = _split_args(argv)
    cfg = to_run_config(compose_config(["drafter=none", *overrides]))
    target_dir = resolve_target(cfg)
    target_config = checkpoints.read_config(target_dir, "target.model")
    draft_config = None
    if draft is not None:
        draft_config = checkpoints.read_config(checkpoints.resolve(draft, "drafter.model"), "drafter.model")
    guidelines = Guidelines.for_configs(target_config, draft_config)
    text = text_config(target_config)
    print(
        f"target: {Path(target_dir)} ({', '.join(target_config.get('architectures') or ['?'])}, "
        f"{text.get('num_hidden_layers')} layers, {text.get('num_attention_heads')} query heads / "
        f"{text.get('num_key_value_heads') or text.get('num_attention_heads')} KV heads)"
    )
    print("\n".join(guidelines.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
