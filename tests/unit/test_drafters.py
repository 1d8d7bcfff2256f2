"""Drafters: vLLM translations, limits and the comparison table."""

from __future__ import annotations

import csv
import io
from contextlib import redirect_stdout

import pytest

from drafters import REGISTRY, make_drafter
from evals.drafters import HEADER
from evals.drafters import main as table_main
from runners.registry import runner_of
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@pytest.mark.parametrize("d", [1, 4, 9])
def test_vllm_translations(d):
    assert make_drafter(REGISTRY["ngram"].config_class(prompt_lookup_min=1, prompt_lookup_max=4)).speculative_config(
        d
    ) == {"method": "ngram", "num_speculative_tokens": d, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    spec = make_drafter(REGISTRY["eagle3"].config_class(model="/m")).speculative_config(d)
    assert spec == {"method": "eagle3", "model": "/m", "num_speculative_tokens": d, "draft_sample_method": "greedy"}
    assert make_drafter(REGISTRY["suffix"].config_class()).speculative_config(d)["suffix_decoding_max_tree_depth"] == 24
    assert make_drafter(REGISTRY["none"].config_class()).speculative_config(d) is None


def test_a_drafter_is_named_by_its_registry_key_alone():
    for name, cls in REGISTRY.items():
        assert make_drafter(cls.config_class()).name == name
    # every drafter has a config class of its own: the class says which drafter it configures
    assert len({cls.config_class for cls in REGISTRY.values()}) == len(REGISTRY)


def test_comparison_table_lists_every_drafter_with_every_fact():
    out = io.StringIO()
    with redirect_stdout(out):
        assert table_main(["--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == HEADER
    by_name = {r[0]: dict(zip(HEADER, r)) for r in rows[1:]}
    assert set(by_name) == set(REGISTRY)
    assert by_name["ngram"]["generation"] == "one lookup" and by_name["ngram"]["replay"] == "exact"
    assert by_name["eagle3"]["inputs"] == "fused target hidden states" and by_name["eagle3"]["checkpoint"] == "yes"
    assert all(all(cell for cell in row) for row in rows)


# --- every mechanism: composed from its config class, translated to vLLM, validated before any engine


from tests.unit.conftest import write_checkpoint  # noqa: E402
from tests.unit.test_errors import attempt  # noqa: E402


@pytest.mark.parametrize("d", [1, 2, 4])
def test_mtp_uses_the_target_layers(d):
    spec = make_drafter(REGISTRY["mtp"].config_class()).speculative_config(d)
    assert spec == {"method": "mtp", "num_speculative_tokens": d}
    assert (
        make_drafter(REGISTRY["mtp"].config_class(method="deepseek_mtp")).speculative_config(d)["method"]
        == "deepseek_mtp"
    )


def test_mtp_refuses_a_target_without_mtp_layers(tmp_path):
    with pytest.raises(ConfigError, match=r"has no multi-token-prediction layers .*num_nextn_predict_layers"):
        attempt(tmp_path, "drafter=mtp")


def test_mtp_d_must_fit_the_layer_count(tmp_path):
    write_checkpoint(tmp_path / "target", num_nextn_predict_layers=2)
    with pytest.raises(
        ConfigError, match=r"d=3 with drafter=mtp: target.model has 2 MTP layers; vLLM needs d <= 2 or a multiple of 2"
    ):
        attempt(tmp_path, "drafter=mtp", "d=3")


def dflash_ckpt(tmp_path, **extra):
    return write_checkpoint(
        tmp_path / "dfl",
        architectures=["DFlashDraftModel"],
        block_size=8,
        dflash_config={"mask_token_id": 99, "target_layer_ids": [0, 1]},
        **extra,
    )


@pytest.mark.parametrize("d", [1, 7])
def test_dflash_translation(tmp_path, d):
    spec = make_drafter(REGISTRY["dflash"].config_class(model="/x")).speculative_config(d)
    assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == d and spec["model"] == "/x"


def test_dflash_d_is_bounded_by_the_block_size(tmp_path):
    draft = dflash_ckpt(tmp_path)
    with pytest.raises(
        ConfigError, match=r"d=8 with drafter=dflash: DFlash drafts one block per step .*block_size=8, so d <= 7"
    ):
        attempt(tmp_path, "drafter=dflash", f"drafter.model={draft}", "d=8")


def test_medusa_d_is_bounded_by_the_heads(tmp_path):
    heads = write_checkpoint(tmp_path / "med", architectures=["MedusaModel"], model_type="medusa", num_heads=3)
    assert make_drafter(REGISTRY["medusa"].config_class(model=str(heads))).speculative_config(3)["method"] == "medusa"
    with pytest.raises(
        ConfigError, match=r"d=4 with drafter=medusa: drafter.model has 3 heads, one per draft position, so d <= 3"
    ):
        attempt(tmp_path, "drafter=medusa", f"drafter.model={heads}", "d=4")


@pytest.mark.parametrize(
    "drafter, architectures, needs",
    [
        ("eagle3", ["LlamaForCausalLM"], "EAGLE-3 head"),
        ("eagle", ["LlamaForCausalLMEagle3"], r"EAGLE\(-1/2\) head"),
        ("dflash", ["LlamaForCausalLM"], r"needs one of \['DFlashDraftModel'\]"),
        ("medusa", ["LlamaForCausalLM"], r"needs one of \['MedusaModel'\]"),
        ("draft_model", ["LlamaForCausalLMEagle3"], "needs a standalone causal LM"),
    ],
)
def test_checkpoint_of_the_wrong_kind_names_both_sides(tmp_path, drafter, architectures, needs):
    ckpt = write_checkpoint(tmp_path / "ckpt", architectures=architectures)
    with pytest.raises(
        ConfigError, match=rf"drafter.model=.* is not a {drafter} checkpoint: its architectures are .*{needs}"
    ):
        attempt(tmp_path, f"drafter={drafter}", f"drafter.model={ckpt}")


def test_a_path_that_vllm_would_relabel_is_refused(tmp_path):
    draft = write_checkpoint(tmp_path / "my-eagle3-distill")
    with pytest.raises(
        ConfigError,
        match=r"the path contains 'eagle3', which makes vLLM run it as method 'eagle3' instead of 'draft_model'",
    ):
        attempt(tmp_path, "drafter=draft_model", f"drafter.model={draft}")


@pytest.mark.parametrize("has_triton", [False, True])
def test_dspark_on_a_build_without_triton_says_why(tmp_path, monkeypatch, has_triton):
    """Both builds on every host: the CPU build (no Triton) refuses in one line, the CUDA build's
    (make gpu-check) passes the check and goes on to the checkpoint's own."""
    from drafters import dspark

    monkeypatch.setattr(dspark, "v2_runner_available", lambda: has_triton)
    draft = write_checkpoint(tmp_path / "ds", architectures=["DSparkDraftModel"])
    if not has_triton:
        with pytest.raises(ConfigError, match=r"drafter=dspark needs vLLM's V2 model runner, which needs Triton"):
            attempt(tmp_path, "drafter=dspark", f"drafter.model={draft}")
    else:
        attempt(tmp_path, "drafter=dspark", f"drafter.model={draft}")


def test_the_embedded_head_drafting_in_parallel_is_refused_before_anything_is_built(monkeypatch):
    from evals.pipeline import plan as plan_module
    from evals.pipeline.compose import compose_config, to_run_config

    monkeypatch.setattr(plan_module, "ensure_drafter", lambda *a, **k: pytest.fail("built a drafter"))
    cfg = to_run_config(compose_config(["drafter=eagle3", "drafter.parallel_drafting=true"]))
    with pytest.raises(
        ConfigError, match=r"^drafter.parallel_drafting=true: speclens builds no eagle3 drafter trained"
    ):
        plan_module.resolve_draft(cfg, make_drafter(cfg.drafter), runner_of(cfg))


def test_mlp_speculator_is_refused_with_the_reason(tmp_path):
    ckpt = write_checkpoint(tmp_path / "mlp", architectures=["MLPSpeculatorPreTrainedModel"])
    with pytest.raises(ConfigError, match=r"mlp_speculator is disabled in vLLM's V1 engine"):
        attempt(tmp_path, "drafter=mlp_speculator", f"drafter.model={ckpt}")


@pytest.mark.parametrize(
    "overrides, build",
    [
        (["drafter=eagle3"], "eagle3"),
        (["drafter=draft_model"], "draft_model"),
        (["drafter=draft_model", "drafter.parallel_drafting=true"], "draft_model_parallel"),
    ],
)
def test_the_embedded_target_drafts_with_its_own_built_drafter_when_drafter_model_is_unset(
    monkeypatch, tmp_path, overrides, build
):
    from evals.pipeline import plan as plan_module
    from evals.pipeline.compose import compose_config, to_run_config

    name = overrides[0].split("=")[1]
    built = write_checkpoint(tmp_path / f"built-{build}")
    asked = []
    monkeypatch.setattr(
        plan_module, "ensure_drafter", lambda mechanism, budget="full": asked.append((mechanism, budget)) or built
    )
    cfg = to_run_config(compose_config(overrides))
    drafter = make_drafter(cfg.drafter)
    assert plan_module.resolve_draft(cfg, drafter, runner_of(cfg)) == built
    assert asked == [(build, "full")] and cfg.drafter.model == str(built)

    # Synthetic acceptance times the shape: the trained build where there is one, else an untrained one.
    for trained, budget in ((False, "untrained"), (True, "full")):
        monkeypatch.setattr(plan_module, "is_built", lambda mechanism, b, trained=trained: trained)
        cfg = to_run_config(compose_config(overrides))
        asked.clear()
        assert plan_module.resolve_draft(cfg, make_drafter(cfg.drafter), runner_of(cfg), shape_only=True) == built
        assert asked == [(build, budget)]

    # Another target keeps the error: speclens has no drafter for it.
    asked.clear()
    cfg = to_run_config(compose_config([f"drafter={name}", "target=custom", f"target.model={tmp_path}"]))
    assert plan_module.resolve_draft(cfg, make_drafter(cfg.drafter), runner_of(cfg)) is None and asked == []
    with pytest.raises(ConfigError, match=rf"drafter={name} needs drafter.model="):
        make_drafter(cfg.drafter).validate(3, ModelFacts.from_config("t", {"vocab_size": 8}), None)


def test_a_speculators_format_head_is_checked_by_its_nested_layer_config():
    head = ModelFacts.from_config(
        "h",
        {
            "architectures": ["Eagle3DraftModel"],
            "speculators_model_type": "eagle3",
            "transformer_layer_config": {"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 1},
        },
    )
    target = ModelFacts.from_config(
        "t", {"architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30}
    )
    make_drafter(REGISTRY["eagle3"].config_class(model="h")).validate(3, target, head)
    wider = ModelFacts.from_config("t", {**target.raw, "hidden_size": 960})
    with pytest.raises(ConfigError, match="has hidden_size=576 but target.model=t has hidden_size=960"):
        make_drafter(REGISTRY["eagle3"].config_class(model="h")).validate(3, wider, head)
    # a head narrower than its target declares the target's width (vLLM sizes its fusion layer by it)
    narrow = ModelFacts.from_config("h", {**head.raw, "target_hidden_size": 960})
    make_drafter(REGISTRY["eagle3"].config_class(model="h")).validate(3, wider, narrow)
    with pytest.raises(ConfigError, match="has target_hidden_size=960 but target.model=t has hidden_size=576"):
        make_drafter(REGISTRY["eagle3"].config_class(model="h")).validate(3, target, narrow)


def _build_facts(**overrides) -> dict:
    """The record of a full-budget EAGLE-3 build, as the builder writes it."""
    import json
    from dataclasses import asdict

    from drafters.training.eagle3_head import HeadPlan
    from speclens.file_formats.drafter_build import DRAFTER_FACTS_VERSION

    facts = {
        "version": DRAFTER_FACTS_VERSION,
        "mechanism": "eagle3",
        "target": "SmolLM2-135M-Instruct",
        "library": "speculators 0.9.0",
        "budget": "full",
        "corpus": {
            "name": "speclens-selfdistill-v1",
            "training_prompts": 720,
            "heldout_prompts": 48,
            "answer_tokens": 101234,
        },
        # as JSON holds it (the plan's tuples are lists)
        "training": json.loads(json.dumps({**asdict(HeadPlan(steps=700)), "final_loss": 4.6864})),
        "heldout_greedy_agreement": [0.5664, 0.3003, 0.1707],
        "build_seconds": {"answers": 180.0, "training": 420.0, "total": 600.0},
    }
    return facts | overrides


@pytest.mark.parametrize("damaged", [1.5, {"1": -1}, {"training": None}, "text"])
def test_a_damaged_build_record_in_a_stamp_is_said_to_be_unreadable(damaged):
    """The report describes the build a run's stamp carries; a stamp from outside may hold anything
    there (found by tests/unit/test_fuzz_commands.py)."""
    from speclens.file_formats.drafter_build import describe_build

    assert describe_build(damaged) == "a build record speclens cannot read (damaged or written by another tool)"


def test_a_build_record_is_described_in_one_line_and_listed_by_evals_drafters(monkeypatch, tmp_path):
    import json

    from evals.embedded.drafter_builds import drafter_dir
    from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE, describe_build

    assert describe_build(_build_facts()) == (
        "eagle3 for SmolLM2-135M-Instruct built by speclens with speculators 0.9.0: speclens-selfdistill-v1 "
        "(720 prompts, 101234 answer tokens), 700 steps, final loss 4.686, held-out greedy agreement "
        "0.57/0.30/0.17, 10.0 min"
    )
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    folder = drafter_dir("eagle3")
    folder.mkdir(parents=True)
    (folder / DRAFTER_FACTS_FILE).write_text(json.dumps(_build_facts()))

    def listed() -> list[str]:
        out = io.StringIO()
        with redirect_stdout(out):
            assert table_main([]) == 0
        return out.getvalue().splitlines()

    lines = listed()
    assert f"- eagle3: {folder}: {describe_build(_build_facts())}" in lines
    assert "- draft_model: not built yet; built on first use, or now with `make drafters`" in lines

    old = drafter_dir("draft_model")
    old.mkdir(parents=True)
    (old / DRAFTER_FACTS_FILE).write_text(json.dumps(_build_facts(version=1, mechanism="draft_model")))
    assert (
        f"- draft_model: {old} was built by an older speclens; rebuilt on first use, or now with `make drafters`"
    ) in listed()
    # built by this speclens, but with another plan than the full budget's (its steps changed since)
    (folder / DRAFTER_FACTS_FILE).write_text(json.dumps(_build_facts(training={"steps": 600, "final_loss": 4.7})))
    assert (
        f"- eagle3: {folder} was built with other training settings; rebuilt on first use, or now with `make drafters`"
    ) in listed()


def test_a_build_record_of_another_version_is_refused_with_the_fix_and_is_not_current(tmp_path):
    import json

    from speclens.errors import CorruptRecord
    from speclens.file_formats.drafter_build import (
        DRAFTER_FACTS_FILE,
        DRAFTER_FACTS_VERSION,
        is_current_build,
        read_drafter_facts,
    )

    assert read_drafter_facts(tmp_path) is None
    assert not is_current_build(tmp_path)
    (tmp_path / DRAFTER_FACTS_FILE).write_text(json.dumps(_build_facts()))
    assert is_current_build(tmp_path)
    (tmp_path / DRAFTER_FACTS_FILE).write_text(json.dumps(_build_facts(version=DRAFTER_FACTS_VERSION - 1)))
    with pytest.raises(
        CorruptRecord,
        match=f"not a version-{DRAFTER_FACTS_VERSION} drafter build record; "
        f"delete {tmp_path} to build the drafter again",
    ):
        read_drafter_facts(tmp_path)
    assert not is_current_build(tmp_path)  # so ensure_drafter builds it again
    # an unreadable record is said, not answered by minutes of building again unasked
    (tmp_path / DRAFTER_FACTS_FILE).write_text("{")
    with pytest.raises(CorruptRecord, match=f"is unreadable .*; delete {tmp_path} to build the drafter again"):
        is_current_build(tmp_path)


def test_ensure_drafter_builds_again_only_a_drafter_of_another_builder_version_or_plan(monkeypatch, tmp_path):
    import json
    from dataclasses import asdict

    from drafters.training.eagle3_head import HeadPlan
    from evals.embedded import drafter_builds as embedded_drafters
    from evals.embedded.drafter_builds import BUDGETS, drafter_dir, ensure_drafter
    from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE

    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    folder = drafter_dir("eagle3", "reduced")
    folder.mkdir(parents=True)
    plan = asdict(HeadPlan(steps=BUDGETS["reduced"].head_steps))
    current = _build_facts(budget="reduced", training={**plan, "final_loss": 4.5})
    (folder / DRAFTER_FACTS_FILE).write_text(json.dumps(current | {"version": 1}))
    commands = []

    def child_build(command, **_):  # the build's child, run in a process group of its own: its status
        commands.append(command[1:])
        (folder / DRAFTER_FACTS_FILE).write_text(json.dumps(current))
        return 0

    monkeypatch.setattr(embedded_drafters, "run_in_group", child_build)
    assert ensure_drafter("eagle3", "reduced") == folder
    assert commands == [["-m", "evals.embedded_drafters", "eagle3", "--budget", "reduced"]]
    assert ensure_drafter("eagle3", "reduced") == folder
    assert len(commands) == 1  # current now: not built again
    # A build of this version whose budget trained another plan (more steps, before the budget changed)
    stale = current | {"training": {**plan, "steps": plan["steps"] + 1, "final_loss": 4.5}}
    (folder / DRAFTER_FACTS_FILE).write_text(json.dumps(stale))
    assert ensure_drafter("eagle3", "reduced") == folder
    assert len(commands) == 2


def test_the_targets_answers_are_generated_once_and_read_back_as_generated(monkeypatch, tmp_path):
    from drafters.training import selfdistill
    from evals.embedded.drafter_builds import BUDGETS, _answers

    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    calls = []

    def generate(target, prompts, max_tokens):
        calls.append((len(prompts), max_tokens))
        return [selfdistill.Sample(p.domain, (1, 2, i), tuple(range(i % 5 + 1))) for i, p in enumerate(prompts)]

    monkeypatch.setattr(selfdistill, "generate_answers_apart", generate)
    budget = BUDGETS["reduced"]
    first = _answers(tmp_path, budget)
    assert _answers(tmp_path, budget) == first and calls == [(budget.prompts + budget.heldout, budget.max_tokens)]
    assert first[7] == selfdistill.Sample(first[7].domain, (1, 2, 7), (0, 1, 2))


def test_the_heads_agreement_counts_chains_as_greedy_verification_accepts_them():
    import torch

    from drafters.training.eagle3_head import chain_agreement

    d2t = torch.tensor([0, 4, 5])  # the draft vocabulary: draft id 0, 1, 2 -> target token 0, 5, 7
    wanted = torch.tensor([[5, 7, 5, 9, 7, 0]])  # the target's argmax per row; 9 is outside the draft vocabulary
    mask = torch.tensor([[True, True, True, True, True, False]])
    first = torch.tensor([[1, 2, 1, 2, 2, 0]])  # proposes wanted[j]: right but at row 3, which it cannot be
    second = torch.tensor([[2, 1, 0, 2, 0, 0]])  # proposes wanted[j + 1]: wrong at row 2; row 3 failed already
    agreed, counted = chain_agreement([first, second], d2t, wanted, mask)
    assert counted == [5.0, 4.0]  # the second draft is counted where the token it proposes is an answer's
    assert agreed == [4.0, 2.0]  # rows 0, 1, 2, 4; then rows 0 and 1 (row 4's second token is not counted)


def test_an_unreadable_build_record_is_refused_in_one_line_not_rebuilt(monkeypatch, tmp_path, capsys):
    import subprocess

    from evals.embedded import drafter_builds as embedded_drafters
    from evals.embedded.drafter_builds import drafter_dir
    from evals.embedded_drafters import main
    from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE

    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    folder = drafter_dir("eagle3", "reduced")
    folder.mkdir(parents=True)
    (folder / DRAFTER_FACTS_FILE).write_text("{not json")
    monkeypatch.setattr(
        embedded_drafters.subprocess,
        "run",
        lambda *a, **k: pytest.fail("started a build") or subprocess.CompletedProcess(a, 0),
    )
    with pytest.raises(Exception, match="is unreadable"):
        embedded_drafters.ensure_drafter("eagle3", "reduced")
    assert main(["eagle3", "--budget", "reduced"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("speclens: error: ") and f"delete {folder}" in err[0]


def _safetensors(path, tensors: dict[str, bytes]) -> None:
    import json
    import struct

    header, offset = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(tensors.values()))


def test_truncated_weights_are_refused_before_vllm_naming_the_drafter_and_how_to_rebuild_it(tmp_path):
    from drafters.checkpoint_drafter import check_weights
    from speclens.errors import ConfigError
    from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE
    from speclens.weights import safetensors_problem

    folder = tmp_path / "head"
    folder.mkdir()
    _safetensors(folder / "model.safetensors", {"a": b"x" * 100, "b": b"y" * 50})
    assert safetensors_problem(folder) is None
    whole = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(whole[:-30])
    assert (
        safetensors_problem(folder)
        == f"model.safetensors is cut short: {len(whole) - 30:,} of its {len(whole):,} bytes"
    )
    with pytest.raises(ConfigError, match="copy or export the checkpoint again"):
        check_weights("eagle3", folder)
    (folder / DRAFTER_FACTS_FILE).write_text("{}")  # one speclens built
    with pytest.raises(
        ConfigError,
        match=rf"^drafter\.model={folder}: model\.safetensors is cut short: .*; delete "
        rf"{folder} and run `python -m evals\.embedded_drafters eagle3`",
    ):
        check_weights("eagle3", folder)
    (folder / "model.safetensors").write_bytes(whole[:5])
    assert safetensors_problem(folder) == "model.safetensors has 5 bytes, not even a header"


def test_a_head_folder_without_weights_is_refused_before_an_engine_loads_it(tmp_path, engines_started):
    from speclens.checkpoints import check_weights_present

    target = write_checkpoint(tmp_path / "target")
    (target / "tokenizer.json").write_text("{}")  # present: what is checked before the weights
    head = write_checkpoint(tmp_path / "head", architectures=["LlamaForCausalLMEagle3"])
    # the fake engine loads no weights; vLLM's loader fails on a config.json alone
    with pytest.raises(
        ConfigError, match=rf"^drafter\.model={head}: the folder holds no weights \(no \.safetensors, \.bin or \.pt"
    ):
        attempt(tmp_path, "runner=vllm", f"target.model={target}", "drafter=eagle3", f"drafter.model={head}", "d=3")
    assert engines_started == []
    (head / "pytorch_model.bin").write_bytes(b"\0" * 8)  # a head published as .bin only (vLLM's example) has weights
    check_weights_present(head, "drafter.model")


def test_the_fake_runner_never_builds_the_embedded_drafters(monkeypatch, capsys, tmp_path):
    """issue 50, part 9: `runner=fake drafter=eagle3` on the embedded target is one line, not a
    14-minute head build, and leaves no run dir."""
    from evals.pipeline import plan as plan_module
    from evals.run import main

    monkeypatch.setattr(plan_module, "ensure_drafter", lambda *a, **k: pytest.fail("built a drafter"))
    with pytest.raises(SystemExit) as ended:  # a Hydra job reports its failure, then exits with its status
        main(["runner=fake", "drafter=eagle3", "d=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert ended.value.code == 2 and not (tmp_path / "run").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("speclens: error: runner=fake loads no model and builds no drafter")
