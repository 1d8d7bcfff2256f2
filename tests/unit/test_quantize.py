"""evals.quantize (issue 49, part 2): a W8A8 compressed-tensors copy of a Llama-family checkpoint,
every decoder Linear within half a scale step of its original, everything else untouched; formats
the CPU build does not run refused in one line naming where they run."""

from __future__ import annotations

import json

import pytest
import torch

from evals.quantize import QUANTIZATION_CONFIG, main, quantize_w8a8
from speclens.errors import ConfigError
from tests.unit.conftest import FAKE_PAIR_NOTE


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from transformers import LlamaForCausalLM

    from tests.fixtures.models import _TARGET_ARCH, _llama_config

    torch.manual_seed(0)
    config = _llama_config(_TARGET_ARCH, vocab_size=128)  # the fixture target's shape, a small vocabulary
    folder = tmp_path_factory.mktemp("tiny") / "llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def test_every_decoder_linear_is_int8_within_half_a_step_and_the_rest_is_untouched(tiny_llama, tmp_path, capsys):
    from safetensors.torch import load_file

    out = tmp_path / "w8a8"
    assert main([str(tiny_llama), "--out", str(out)]) == 0
    assert "14 weights" in capsys.readouterr().out  # 7 Linear layers in each of 2 decoder layers
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == QUANTIZATION_CONFIG
    assert config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] == "channel"
    assert (out / "tokenizer_config.json").is_file()
    original, written = load_file(tiny_llama / "model.safetensors"), load_file(out / "model.safetensors")
    linears = [n for n in original if n.endswith("_proj.weight")]
    assert len(linears) == 14
    for name, tensor in original.items():
        if name in linears:
            q, scale = written[name], written[name + "_scale"]
            assert q.dtype == torch.int8 and scale.shape == (tensor.shape[0], 1)
            assert int(q.abs().max()) == 127  # each row's largest weight lands on the end of the range
            assert (q.float() * scale - tensor.float()).abs().le(scale / 2 + 1e-7).all()
        else:
            assert torch.equal(written[name], tensor)  # embeddings, norms, lm_head kept as they are


def test_rounding_is_per_row_and_a_zero_row_stays_zero():
    weight = torch.tensor([[0.5, -1.27, 0.0], [0.0, 0.0, 0.0], [2.54, 1.0, -0.02]])
    q, scale = quantize_w8a8(weight)
    assert scale.flatten().tolist() == pytest.approx([0.01, 1.0, 0.02])
    assert q.tolist() == [[50, -127, 0], [0, 0, 0], [127, 50, -1]]


@pytest.mark.parametrize(
    "scheme, said",
    [
        ("W4A16", r"^--scheme W4A16: vLLM's CPU build does not run it here: int4 weights need cpu_gemm_wna16"),
        ("nvfp4", r"^--scheme nvfp4: vLLM's CPU build does not run it here: it needs Marlin or CUTLASS FP4"),
        ("FP8", r"^--scheme FP8: vLLM's CPU build does not run it here: the CPU build's static_scaled_fp8_quant"),
        ("int3", r"^--scheme int3: choose one of W8A8\.$"),
    ],
)
def test_a_format_the_cpu_build_cannot_run_is_refused_naming_where_it_runs(tiny_llama, tmp_path, scheme, said):
    with pytest.raises(ConfigError, match=said):
        main.__wrapped__([str(tiny_llama), "--scheme", scheme, "--out", str(tmp_path / "q")])
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    "out, said",
    [
        ("file/q", r"^--out=file/q: \S+/file is a file, and no folder can be made under it; choose another --out\.$"),
        ("x" * 300, r"^--out=x+…: the name 'x+…' is 300 bytes long, and this file system takes at most \d+ per name"),
        ("", r"^--out is empty; give the folder to write into"),
    ],
)
def test_an_out_that_cannot_be_written_is_one_line_before_any_work(
    tiny_llama, tmp_path, capsys, monkeypatch, out, said
):
    """Issue 56: `--out` under a file or too long was a traceback (exit 1)."""
    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=said):
        main.__wrapped__([str(tiny_llama), "--out", out])
    assert main([str(tiny_llama), "--out", out]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("speclens: error: --out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_quantized_checkpoint_is_not_quantized_again(tiny_llama, tmp_path):
    main([str(tiny_llama), "--out", str(tmp_path / "once")])
    with pytest.raises(ConfigError, match=r"is quantized already \(w8a8\)\.$"):
        main.__wrapped__([str(tmp_path / "once"), "--out", str(tmp_path / "twice")])


def test_the_checkpoints_quantization_is_a_setting_paired_with_the_float_draft(tmp_path):
    """A sweep over drafter.model=<float>,<w8a8>: two lines (the quantized one labelled from its
    config.json), and the report pairs the quantized draft's run with the float one."""
    from evals.pipeline.run_job import run
    from reports.curves import collect
    from reports.runs import find_runs
    from reports.settings import settings_table
    from speclens.model_facts import ModelFacts
    from tests.unit.conftest import compose_run, fake_overrides, write_checkpoint

    rows = [{"question_id": f"q{i}", "category": "chat", "turns": [f"tell me about {i} " * 3]} for i in range(3)]
    drafts = {
        "float": write_checkpoint(tmp_path / "draft"),
        "w8a8": write_checkpoint(tmp_path / "draft-w8a8", quantization_config=QUANTIZATION_CONFIG),
    }
    assert ModelFacts.from_config("d", json.loads((drafts["w8a8"] / "config.json").read_text())).quantization == "w8a8"
    for name, draft in drafts.items():
        cfg = compose_run(*fake_overrides(tmp_path, rows), "drafter=draft_model", f"drafter.model={draft}", "d=3")
        run(cfg, tmp_path / "sweep" / name, progress=lambda label: None)
    curves = collect(tmp_path / "sweep")
    assert sorted(set(curves.setting)) == ["", "drafter.quantization=w8a8"]
    table, notes = settings_table(find_runs(tmp_path / "sweep"))
    assert notes == [] and list(table.setting) == ["drafter.quantization=w8a8"]
    assert table.iloc[0].baseline_run.endswith("float") and table.iloc[0].n_requests == 3
    from reports.compare import compare

    _, compared_notes = compare(tmp_path / "sweep" / "float", tmp_path / "sweep" / "w8a8")
    assert compared_notes == [
        FAKE_PAIR_NOTE,
        f"drafter=draft_model d=3 (drafter.quantization=w8a8): another draft checkpoint, drafter.model "
        f"{drafts['float']} → {drafts['w8a8']}",
    ]


@pytest.mark.parametrize(
    "quantization_config, label",
    [
        (None, None),
        ({"quant_method": "awq", "bits": 4}, "awq"),
        ({"quant_method": "fp8"}, "fp8"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}, "input_activations": None}},
            },
            "w4a16",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {"weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8}}
                },
            },
            "fpw8a8",
        ),
    ],
)
def test_a_checkpoints_quantization_is_labelled_from_its_config(quantization_config, label):
    from speclens.model_facts import ModelFacts

    config = {"architectures": ["LlamaForCausalLM"]}
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    assert ModelFacts.from_config("m", config).quantization == label


@pytest.mark.parametrize(
    "hostile, label",
    [
        ({"quant_method": "compressed-tensors", "config_groups": {"g": ["weights"]}}, "w?a16"),
        ({"config_groups": 3}, "unknown"),
        ("fp8", None),
    ],
)
def test_a_malformed_quantization_config_is_labelled_not_a_traceback(hostile, label):
    from speclens.model_facts import ModelFacts

    assert ModelFacts.from_config("m", {"quantization_config": hostile}).quantization == label


def test_an_eagle3_heads_fc_is_quantized_with_its_decoder_layer(tmp_path):
    """vLLM builds a head's `fc` with the head's quantization config, so it is int8 too; the
    draft-to-target vocabulary maps and the embedding stay as they are."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    head = tmp_path / "head"
    head.mkdir()
    tensors = {
        "fc.weight": torch.randn(8, 24),
        "layers.0.self_attn.q_proj.weight": torch.randn(8, 16),
        "layers.0.mlp.down_proj.weight": torch.randn(8, 12),
        "embed_tokens.weight": torch.randn(32, 8),
        "lm_head.weight": torch.randn(16, 8),
        "d2t": torch.arange(16),
    }
    save_file(tensors, head / "model.safetensors")
    (head / "config.json").write_text(json.dumps({"architectures": ["Eagle3DraftModel"], "draft_vocab_size": 16}))
    assert main([str(head), "--out", str(tmp_path / "w8a8")]) == 0
    written = load_file(tmp_path / "w8a8" / "model.safetensors")
    quantized = {n for n, t in written.items() if t.dtype == torch.int8}
    assert quantized == {"fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.mlp.down_proj.weight"}
    fc, scale = written["fc.weight"], written["fc.weight_scale"]
    assert (fc.float() * scale - tensors["fc.weight"]).abs().le(scale / 2 + 1e-7).all()
    for name in ("embed_tokens.weight", "lm_head.weight", "d2t"):
        assert torch.equal(written[name], tensors[name])
