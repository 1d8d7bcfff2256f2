"""The embedded target's own drafters, built with the reduced budget of the same builder (about two
minutes, cached between runs), measured by real vLLM against their untrained starting points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drafters.training.corpus import CORPUS, shared_passages
from drafters.training.optimise import PROBE_STEPS
from evals.embedded.drafter_builds import (
    BUDGETS,
    BUILD_OVERRIDES,
    EMBEDDED_DRAFTERS,
    _answers,
    ensure_drafter,
    evaluation_sets,
    training_set,
)
from evals.embedded.target import ensure_smollm2
from speclens.file_formats.drafter_build import describe_build, read_drafter_facts
from speclens.file_formats.run_files import read_outputs
from tests.integration.conftest import measure

REDUCED = BUDGETS["reduced"]


def by_build(test_mechanisms: list[str]) -> list:
    """One parameter per build, each in the xdist group of its build: the tests that measure a build
    run on one worker, which builds and measures it once (`measured` below), and the three builds
    spread over both workers. The others read only what the builder cached (locked while a worker
    builds it) and run on either."""
    return [pytest.param(m, marks=pytest.mark.xdist_group(f"embedded_{m}")) for m in test_mechanisms]


@pytest.fixture(scope="module")
def samples():
    return _answers(ensure_smollm2(), REDUCED)  # generated once, cached (the builds start from them)


# Trained in a child process, as the builder does: vLLM, run in this process by the other tests,
# pins this process's threads, which makes torch training here many times slower.
_PROBE = """
import json, sys
from evals.embedded.drafter_builds import BUDGETS, training_probe
print(json.dumps(training_probe(sys.argv[1], BUDGETS["reduced"])))
"""


EVALUATED = ["dataset=mt_bench", "dataset.num_requests=6", "sampling.max_tokens=48", "d=3", "engine.dtype=float32"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """measured(mechanism): the reduced build (built on first use) and its run dir and summary,
    measured once on this worker."""
    runs: dict[str, tuple[Path, Path, dict]] = {}

    def get(mechanism: str) -> tuple[Path, Path, dict]:
        if mechanism not in runs:
            folder = ensure_drafter(mechanism, "reduced")
            out = tmp_path_factory.mktemp(f"trained-{EMBEDDED_DRAFTERS[mechanism]}")
            runs[mechanism] = (
                folder,
                out,
                measure(out, *EVALUATED, *BUILD_OVERRIDES[mechanism], f"drafter.model={folder}"),
            )
        return runs[mechanism]

    return get


@pytest.fixture(scope="module")
def plain_answers(tmp_path_factory) -> dict[tuple[str, int], list[int]]:
    """Plain decoding of the evaluated prompts, once per worker for the builds it measures (what
    baseline=true would run beside each, and its zero-cost timing pass, which nothing here reads)."""
    out = tmp_path_factory.mktemp("plain")
    measure(out, *EVALUATED, "drafter=none")
    return answers_in(out)


def answers_in(run_dir: Path) -> dict[tuple[str, int], list[int]]:
    return {(row["request_id"], row["turn"]): row["token_ids"] for row in read_outputs(run_dir / "outputs.jsonl")}


@pytest.mark.parametrize("mechanism", by_build(list(EMBEDDED_DRAFTERS)))
def test_a_reduced_build_beats_its_untrained_start_in_vllm(measured, plain_answers, tmp_path, mechanism):
    """Against the same shape untrained (the `untrained` budget's build, built in seconds: for the
    draft models the trainer's very start, the target's kept layers; for the head a seeded one)."""
    overrides = [*EVALUATED, *BUILD_OVERRIDES[mechanism]]
    _, trained_dir, summary = measured(mechanism)
    untrained_dir = ensure_drafter(mechanism, "untrained")
    untrained = measure(tmp_path / "untrained", *overrides, f"drafter.model={untrained_dir}")
    # Untrained, nothing is accepted (the draft model's kept layers agree with the target ~1% of the time).
    assert untrained["al"] < 1.05
    assert summary["al"] > untrained["al"] + 0.05
    # vLLM loaded it as it is, and greedy speculation with it stayed lossless (float32: every token).
    assert answers_in(trained_dir) == plain_answers
    assert len({request for request, _ in plain_answers}) == summary["n_requests"]
    assert all(len(answer) > 0 for answer in plain_answers.values())


@pytest.mark.parametrize("mechanism", by_build(list(EMBEDDED_DRAFTERS)))
def test_the_build_record_says_what_was_trained_and_the_stamp_carries_it(measured, mechanism):
    built, trained_dir, _ = measured(mechanism)
    facts = read_drafter_facts(built)
    assert facts["mechanism"] == mechanism and facts["budget"] == "reduced"
    assert facts["corpus"]["name"] == CORPUS["name"]
    chosen = training_set(ensure_smollm2(), REDUCED)
    dropped = facts["corpus"]["dropped_recitations"]

    # A build cached by a checkout that had Spec-Bench's rows beside it (the workplace's shared/) and read
    # by one that has not, or the other way round, is the same build where that source dropped nothing.
    def without_empty_spec_bench(counts: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in counts.items() if (k, v) != ("spec_bench", 0)}

    assert without_empty_spec_bench(dropped) == without_empty_spec_bench(chosen.dropped)
    assert (
        facts["corpus"]["training_prompts"] + facts["corpus"]["heldout_prompts"] + sum(dropped.values())
        == REDUCED.prompts + REDUCED.heldout
    )
    assert facts["corpus"]["training_prompts"] == len(chosen.train) > 0.8 * REDUCED.prompts
    decoded = facts["corpus"]["answers_decoded"]
    assert (decoded["dtype"], decoded["threads"]) == ("float32", 1)
    steps = REDUCED.head_steps if mechanism == "eagle3" else REDUCED.draft_steps
    assert facts["training"]["steps"] == steps
    agreement = facts["heldout_greedy_agreement"]
    first = agreement[0] if isinstance(agreement, list) else agreement
    assert 0.0 < first <= 1.0
    assert f"{steps} steps" in describe_build(facts)
    assert facts["training_probe"]["steps"] == PROBE_STEPS  # (checked again: the byte test below)
    # A run drafting with it stamps the build record (the report shows it from there).
    stamp = json.loads((trained_dir / "stamp.json").read_text())
    assert stamp["draft_build"] == facts


# Generated again in a child process pinned to one core, with the in-process engine setting this test
# process has: what a build on a machine with fewer cores, or from a pinned caller, would do. Every
# prompt (a slice was tried: the child's start-up and its 96 decode steps cost the same for 14 as for 56).
_REGENERATE = """
import json, os
from drafters.training.selfdistill import generate_answers
from evals.embedded.drafter_builds import BUDGETS, _prompts
from evals.embedded.target import ensure_smollm2
os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
budget = BUDGETS["reduced"]
samples = generate_answers(ensure_smollm2(), _prompts(budget), budget.max_tokens)
print(json.dumps([list(s.answer_ids) for s in samples]))
"""


def test_the_targets_answers_are_the_same_tokens_from_one_core_and_an_in_process_caller(samples):
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # set by conftest, inherited by the child
    proc = subprocess.run([sys.executable, "-c", _REGENERATE], check=True, capture_output=True, text=True)
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert again == [list(s.answer_ids) for s in samples]
    assert sum(len(a) for a in again) > 2000  # answers, not empty strings


def test_the_answers_trained_on_hold_no_evaluation_text(samples):
    """The target recites some evaluation texts (SmolLM2: HumanEval docstrings); those answers are
    dropped before training, and what is kept shares no 8-word run with any evaluation set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_smollm2()))
    chosen = training_set(ensure_smollm2(), REDUCED)
    kept = [tokenizer.decode(s.answer_ids) for s in chosen.train + chosen.heldout]
    assert len(kept) + sum(chosen.dropped.values()) == len(samples) == REDUCED.prompts + REDUCED.heldout
    for name, texts in evaluation_sets().items():
        assert shared_passages(kept, texts) == [], name


@pytest.mark.parametrize("mechanism", list(EMBEDDED_DRAFTERS))
def test_training_again_from_the_cached_answers_gives_the_same_bytes(mechanism):
    """The build's first steps again, in a child pinned as this worker is: the weights' digest the
    build recorded after PROBE_STEPS steps (the whole build again costs a minute or more each)."""
    recorded = read_drafter_facts(ensure_drafter(mechanism, "reduced"))["training_probe"]
    proc = subprocess.run([sys.executable, "-c", _PROBE, mechanism], check=True, capture_output=True, text=True)
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert again == recorded
    assert recorded["steps"] == PROBE_STEPS and len(recorded["sha256"]) == 64


_AGREEMENT = """
import json, sys
from pathlib import Path
from drafters.training.eagle3_head import head_agreement
from evals.embedded.drafter_builds import BUDGETS, training_samples
from evals.embedded.target import ensure_smollm2
_, heldout = training_samples(ensure_smollm2(), BUDGETS["reduced"])
print(json.dumps(head_agreement(ensure_smollm2(), Path(sys.argv[1]), {"heldout": heldout})["heldout"]))
"""


def test_the_heads_recorded_agreement_comes_back_from_its_saved_weights():
    head = ensure_drafter("eagle3", "reduced")
    # In a child process for the same reason as _PROBE.
    proc = subprocess.run([sys.executable, "-c", _AGREEMENT, str(head)], check=True, capture_output=True, text=True)
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert again == read_drafter_facts(head)["heldout_greedy_agreement"]
    assert len(again) == 3 and again[0] > 0.0


@pytest.mark.xdist_group("embedded_draft_model_parallel")
def test_the_parallel_draft_model_is_measured_at_each_d_and_stays_lossless(measured, plain_answers, tmp_path):
    """drafter.parallel_drafting=true on the embedded parallel draft model: one measured run per D,
    three measured curve points on a line of their own, greedy speculation at every D gives plain
    decoding's tokens (float32), and the replay from one pass equals each of them."""
    import shutil

    from evals.pipeline.compose import compose_config
    from evals.replay import replay
    from reports.curves import collect
    from speclens.file_formats.summary_file import read_replay

    mechanism = "draft_model_parallel"
    built, trained_dir, _ = measured(mechanism)
    sweep = tmp_path / "sweep"
    shutil.copytree(trained_dir, sweep / "d3")
    others = [o for o in EVALUATED if not o.startswith("d=")]
    for d in (1, 5):
        measure(sweep / f"d{d}", *others, f"d={d}", *BUILD_OVERRIDES[mechanism], f"drafter.model={built}")
    for d in (1, 3, 5):
        assert answers_in(sweep / f"d{d}") == plain_answers, d
        profile = json.loads((sweep / f"d{d}" / "speculation_profile.json").read_text())["profiles"][0]
        assert profile["measured_per_k"] is True and list(profile["acceptance_length_by_k"]) == [str(d)]
    # its first k drafts do not depend on D >= k (causal over the masks): the curve from one pass
    # (runners/parallel_draft.py), equal in float32 to each measured D, drawn between them
    overrides = [*others, *BUILD_OVERRIDES[mechanism], f"drafter.model={built}"]
    curve = replay(compose_config([*overrides, "d_max=5"], "replay"), sweep / "replay_parallel")
    curve = curve[(curve.domain == "all") & (curve.segment == "all")].set_index("d")
    near_ties = read_replay(sweep / "replay_parallel").summary.near_ties
    assert set(curve.source) == {"replayed"} and near_ties is not None
    for d in (1, 3, 5):
        assert_replayed_as_measured(curve, json.loads((sweep / f"d{d}" / "summary.json").read_text()), d, near_ties)
    curves = collect(sweep)
    whole = curves[(curves.domain == "all") & (curves.segment == "all")].set_index("d").sort_index()
    assert list(whole.source) == ["measured", "replayed", "measured", "replayed", "measured"]
    assert set(whole.setting) == {"drafter.parallel_drafting=true"}
    assert all(1.0 < al <= 1 + d for d, al in whole.al.items())


def assert_replayed_as_measured(curve, summary: dict, d: int, near_ties: int) -> None:
    """The replayed point at `d` is the measured run's: exactly where no draft a kernel's rounding
    could flip was counted, else within what those near-ties can move (each at most d tokens)."""
    gap = abs(curve.al[d] - summary["al"])
    if near_ties == 0:
        assert gap < 1e-12, d
        assert curve.tokens_per_step[d] == pytest.approx(summary["tokens_per_step"], rel=1e-12)
    else:
        assert gap <= near_ties * d / summary["n_steps"], (d, near_ties)


@pytest.mark.xdist_group("embedded_eagle3")
def test_a_w8a8_copy_of_the_head_runs_in_vllm_and_is_labelled(measured, plain_answers, tmp_path):
    """evals.quantize's copy of the head (its decoder layer and `fc` int8) is read by vLLM's CPU
    build as int8 (weights read as floats would accept nothing), and its runs say so."""
    from evals.quantize import main as quantize

    quantized = tmp_path / "head-w8a8"
    assert quantize([str(measured("eagle3")[0]), "--out", str(quantized)]) == 0
    out = tmp_path / "run"
    summary = measure(out, *EVALUATED, "drafter=eagle3", f"drafter.model={quantized}")
    assert summary["al"] > 1.05
    assert answers_in(out) == plain_answers
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["quantization"] == {"target": None, "draft": "w8a8"}


@pytest.mark.xdist_group("embedded_eagle3")
def test_the_heads_curve_replayed_from_one_pass_is_the_measured_runs(measured, plain_answers, tmp_path):
    """`evals.replay drafter=eagle3` on the reduced head: one plain generation, the target's states
    and the head's chains from every position (runners/head_chain.py), each D replayed with its own
    step boundaries; equal in float32 to runs measured at D = 1, 3 and 5 on the same prompts (any
    difference only where the replay counted a near-tie), and drawn with them, each by source."""
    import shutil

    from evals.pipeline.compose import compose_config
    from evals.replay import replay
    from reports.curves import collect
    from speclens.file_formats.summary_file import read_replay

    mechanism = "eagle3"
    built, trained_dir, _ = measured(mechanism)
    others = [o for o in EVALUATED if not o.startswith("d=")]
    overrides = [*others, *BUILD_OVERRIDES[mechanism], f"drafter.model={built}"]
    sweep = tmp_path / "sweep"
    shutil.copytree(trained_dir, sweep / "d3")
    for d in (1, 5):
        measure(sweep / f"d{d}", *overrides, f"d={d}")
    curve = replay(compose_config([*overrides, "d_max=5"], "replay"), sweep / "replay_eagle3")
    near_ties = read_replay(sweep / "replay_eagle3").summary.near_ties
    assert near_ties is not None and near_ties >= 0
    replayed = curve[(curve.domain == "all") & (curve.segment == "all")].set_index("d")
    assert list(replayed.index) == [1, 2, 3, 4, 5] and set(replayed.source) == {"replayed"}
    for d in (1, 3, 5):
        assert answers_in(sweep / f"d{d}") == plain_answers, d  # the replay follows plain decoding's tokens
        assert_replayed_as_measured(replayed, json.loads((sweep / f"d{d}" / "summary.json").read_text()), d, near_ties)
    # drawn together: a measured point where a run measured that D, the replayed one elsewhere
    whole = collect(sweep)
    whole = whole[(whole.domain == "all") & (whole.segment == "all")].set_index("d").sort_index()
    assert list(whole.source) == ["measured", "replayed", "measured", "replayed", "measured"]
