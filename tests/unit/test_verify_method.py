"""verify.method (issue 49, part 4): block verification is passed to vLLM only where its Model
Runner V2 runs, and refused in one line where V1 would verify token by token under its name."""

from __future__ import annotations

import pytest

from evals.pipeline import plan
from evals.pipeline.compose import to_run_config
from runners import model_runner, vllm_runner
from speclens.config import config_fingerprint
from speclens.errors import ConfigError
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [{"question_id": f"q{i}", "category": "chat", "turns": [f"say something about {i} " * 4]} for i in range(4)]


def test_block_verification_reaches_the_speculative_config_and_the_fingerprint(tmp_path):
    base = [*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3"]
    block = plan.make_plan(to_run_config(compose_run(*base, "verify.method=block")))
    assert block.speculative_config()["rejection_sample_method"] == "block"
    standard = plan.make_plan(to_run_config(compose_run(*base)))
    assert "rejection_sample_method" not in standard.speculative_config()  # vLLM's default, as before
    names = {"drafter": "ngram"}
    old = config_fingerprint({"d": 3}, names)
    assert config_fingerprint({"d": 3, "verify": {"method": "standard"}}, names) == old
    assert config_fingerprint({"d": 3, "verify": {"method": "block"}}, names) != old


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["drafter=ngram", "verify.method=tree"], r"^verify\.method=tree: choose one of standard, block\.$"),
        (
            ["drafter=none", "verify.method=block"],
            r"^verify\.method=block verifies drafts, and drafter=none drafts none",
        ),
        (
            ["drafter=ngram", "d=3", "verify.method=block", "acceptance.synthetic=[0.8,0.6,0.4]"],
            r"^verify\.method=block with acceptance\.synthetic: synthetic acceptance is its own rejection method",
        ),
    ],
)
def test_a_combination_vllm_cannot_verify_is_one_line_before_any_engine(tmp_path, overrides, said):
    with pytest.raises(ConfigError, match=said):
        plan.make_plan(to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), *overrides)))


def test_block_verification_on_model_runner_v1_is_refused_naming_the_runner(tmp_path, monkeypatch):
    """vLLM 0.32's V1 rejection sampler has no block path (vllm/v1/sample/rejection_sampler.py):
    the CPU build (no Triton) and engine.model_runner=v1 are refused; V2 passes."""
    from evals.pipeline import verify

    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "verify.method=block"))
    drafter = plan.make_drafter(cfg.drafter)
    monkeypatch.setattr(vllm_runner, "on_cpu", lambda: False)
    monkeypatch.setattr(model_runner, "triton_available", lambda: False)
    with pytest.raises(ConfigError, match=r"only in Model Runner V2's rejection sampler .*this build has no Triton"):
        verify.check_verify(cfg, drafter, None, "vllm")
    monkeypatch.setattr(model_runner, "triton_available", lambda: True)
    verify.check_verify(cfg, drafter, None, "vllm")  # a GPU build: V2 verifies blocks
    cfg.engine.model_runner = "v1"
    with pytest.raises(ConfigError, match=r"and engine\.model_runner=v1 asks for V1; V1 would verify token by token"):
        verify.check_verify(cfg, drafter, None, "vllm")


def test_an_attached_server_verifies_as_it_was_started(tmp_path):
    from runners.server_runner import check_support

    attached = to_run_config(
        compose_run(
            *fake_overrides(tmp_path, ROWS), "runner=server", "runner.url=http://127.0.0.1:9", "verify.method=block"
        )
    )
    with pytest.raises(ConfigError, match=r"^verify\.method=block with runner\.url: an attached server verifies"):
        check_support(attached, speculative=True)


def test_draft_sampling_is_one_run_under_either_spelling_and_passed_to_vllm(tmp_path):
    """verify.draft_sampling is folded into drafter.sample_method when composed: one fingerprint,
    one speculative config; greedy (the default) leaves every earlier run's identity alone."""
    from evals.pipeline.compose import run_fingerprint

    base = [*fake_overrides(tmp_path, ROWS), "drafter=draft_model", f"drafter.model={tmp_path / 'target'}", "d=3"]

    def composed(*more):
        cfg = compose_run(*base, *more)
        typed = to_run_config(cfg)
        return typed, run_fingerprint(cfg, typed)

    new, new_print = composed("verify.draft_sampling=probabilistic")
    old, old_print = composed("drafter.sample_method=probabilistic")
    assert new_print == old_print and new.verify.draft_sampling is None
    assert plan.make_plan(new).speculative_config()["draft_sample_method"] == "probabilistic"
    assert composed("verify.draft_sampling=greedy")[1] == composed()[1]
    assert composed("verify.draft_sampling=probabilistic")[1] != composed()[1]


@pytest.mark.parametrize(
    "overrides, said",
    [
        (
            ["drafter=ngram", "verify.draft_sampling=probabilistic"],
            r"^verify\.draft_sampling=probabilistic: drafter=ngram proposes tokens without a distribution",
        ),
        (["drafter=ngram", "verify.draft_sampling=top_k"], r"^verify\.draft_sampling=top_k: choose one of greedy, "),
        (
            ["drafter=draft_model", "drafter.sample_method=probabilistic", "verify.draft_sampling=greedy"],
            r"^verify\.draft_sampling=greedy and drafter\.sample_method=probabilistic disagree; give one",
        ),
    ],
)
def test_a_draft_sampling_vllm_cannot_honour_is_one_line_when_composed(tmp_path, overrides, said):
    with pytest.raises(ConfigError, match=said):
        to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), *overrides))


def test_draft_sampling_is_an_axis_paired_in_the_report(tmp_path):
    """At temperature 1, greedy and probabilistic drafting are two lines of one sweep, and the
    report's paired section sets the probabilistic run beside the greedy one."""
    from evals.pipeline.run_job import run
    from reports.curves import collect
    from reports.runs import find_runs
    from reports.settings import settings_table

    sweep = tmp_path / "sweep"
    for name, more in (("greedy", []), ("probabilistic", ["verify.draft_sampling=probabilistic"])):
        overrides = fake_overrides(tmp_path, ROWS)
        draft = ["drafter=draft_model", f"drafter.model={tmp_path / 'target'}", "d=3", "sampling.temperature=1"]
        run(compose_run(*overrides, *draft, *more), sweep / name, progress=lambda label: None)
    curves = collect(sweep)
    assert sorted(set(curves.setting)) == ["", "verify.draft_sampling=probabilistic"]
    table, notes = settings_table(find_runs(sweep))
    assert notes == [] and list(table.setting) == ["verify.draft_sampling=probabilistic"]
    assert table.iloc[0].temperature == 1.0 and table.iloc[0].n_requests == 4
