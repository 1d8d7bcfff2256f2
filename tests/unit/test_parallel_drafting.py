"""drafter.parallel_drafting (issue 49, part 3): passed to vLLM for a checkpoint trained for it,
refused in one line for one that is not (vLLM's own condition: a mask token in its config.json),
measured at each D (no replay), and said in the profile (`measured_per_k`)."""

from __future__ import annotations

import json

import pytest

from evals.pipeline import plan
from evals.pipeline.compose import run_fingerprint, to_run_config
from evals.pipeline.run_job import run
from reports.curves import collect
from speclens.errors import ConfigError
from tests.unit.conftest import compose_run, fake_overrides, write_checkpoint

ROWS = [{"question_id": f"q{i}", "category": "chat", "turns": [f"say something about {i} " * 4]} for i in range(4)]


def draft_overrides(tmp_path, **config) -> list[str]:
    draft = write_checkpoint(tmp_path / "draft", **config)
    return [*fake_overrides(tmp_path, ROWS), "drafter=draft_model", f"drafter.model={draft}"]


def test_a_pard_checkpoint_drafts_in_parallel_and_is_a_run_of_its_own(tmp_path):
    base = draft_overrides(tmp_path, pard_token=99)

    def composed(*more):
        cfg = compose_run(*base, "d=3", *more)
        typed = to_run_config(cfg)
        return plan.make_plan(typed), run_fingerprint(cfg, typed)

    parallel, parallel_print = composed("drafter.parallel_drafting=true")
    serial, serial_print = composed()
    assert parallel.speculative_config()["parallel_drafting"] is True
    assert "parallel_drafting" not in serial.speculative_config()  # vLLM's default, as before
    assert parallel_print != serial_print
    assert composed("drafter.parallel_drafting=false")[1] == serial_print  # earlier runs keep their identity


@pytest.mark.parametrize("drafter", ["draft_model", "eagle3"])
def test_a_checkpoint_without_a_mask_token_is_refused_in_one_line_before_any_engine(tmp_path, drafter):
    if drafter == "draft_model":
        overrides = draft_overrides(tmp_path)
    else:
        head = write_checkpoint(tmp_path / "head", architectures=["LlamaForCausalLMEagle3"], hidden_size=16)
        overrides = [*fake_overrides(tmp_path, ROWS), "drafter=eagle3", f"drafter.model={head}"]
    with pytest.raises(ConfigError) as refused:
        plan.make_plan(to_run_config(compose_run(*overrides, "drafter.parallel_drafting=true")))
    said = str(refused.value)
    assert said.startswith("drafter.parallel_drafting=true: drafter.model=") and "\n" not in said
    assert "was not trained for parallel drafting" in said and "pard_token, ptd_token_id" in said


def test_each_d_is_measured_and_the_profile_says_so(tmp_path):
    """Three parallel runs give three measured curve points, a line of their own beside the serial
    run; each profile holds AL at its own D only, and a replay draws the D between them."""
    base = draft_overrides(tmp_path, pard_token=99)
    sweep = tmp_path / "sweep"
    for d in (1, 3, 5):
        run(
            compose_run(*base, f"d={d}", "drafter.parallel_drafting=true"), sweep / f"d{d}", progress=lambda label: None
        )
    run(compose_run(*base, "d=3"), sweep / "serial", progress=lambda label: None)
    curves = collect(sweep)
    whole = curves[curves.domain == "all"]
    parallel = whole[whole.setting == "drafter.parallel_drafting=true"]
    assert sorted(parallel.d) == [1, 3, 5] and set(parallel.source) == {"fake"}
    assert list(whole[whole.setting == ""].d) == [3]
    profile = json.loads((sweep / "d3" / "speculation_profile.json").read_text())["profiles"][0]
    assert profile["measured_per_k"] is True and profile["acceptance_length_by_k"] == {"3": profile["al"]}
    serial = json.loads((sweep / "serial" / "speculation_profile.json").read_text())["profiles"][0]
    assert serial["measured_per_k"] is False and list(serial["acceptance_length_by_k"]) == ["1", "2", "3"]

    from evals.pipeline.compose import compose_config
    from evals.replay import replay

    # its first k drafts do not depend on D >= k (causal over the masks): replayed from its mask
    # blocks (runners/parallel_draft.py), drawn on its own line with the measured points
    replayed = replay(
        compose_config([*base, "drafter.parallel_drafting=true", "d_max=5"], "replay"), sweep / "replay_parallel"
    )
    assert set(replayed.source) == {"replayed"} and set(replayed.setting) == {"drafter.parallel_drafting=true"}
    whole = collect(sweep)
    line = whole[(whole.domain == "all") & (whole.setting == "drafter.parallel_drafting=true")].set_index("d")
    assert list(line.sort_index().source) == ["fake", "replayed", "fake", "replayed", "fake"]
    # P-EAGLE (an EAGLE-3 head drafting in parallel) qualifies too, but is not computed: refused in one line
    head = write_checkpoint(tmp_path / "peagle", architectures=["LlamaForCausalLMEagle3"], pard_token=99)
    peagle = [
        *fake_overrides(tmp_path, ROWS),
        "drafter=eagle3",
        f"drafter.model={head}",
        "drafter.parallel_drafting=true",
    ]
    with pytest.raises(ConfigError, match=r"^drafter=eagle3 drafter.parallel_drafting=true \(P-EAGLE\): its first k"):
        replay(compose_config([*peagle, "d_max=5"], "replay"), tmp_path / "replay")
