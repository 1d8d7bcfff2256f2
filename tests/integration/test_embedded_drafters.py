"""The embedded target's own drafters, built with the reduced budget of the same builder (about two
minutes, cached between runs), measured by real vLLM against their untrained starting points."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drafters.training.corpus import CORPUS, shared_passages
from evals.embedded_drafters import (
    BUDGETS,
    BUILD_OVERRIDES,
    EMBEDDED_DRAFTERS,
    _answers,
    ensure_drafter,
    evaluation_sets,
    training_set,
)
from evals.embedded_target import ensure_smollm2
from speclens.drafter_build import DRAFTER_FACTS_FILE, describe_build, read_drafter_facts
from speclens.run_files import read_outputs
from tests.integration.conftest import measure

REDUCED = BUDGETS["reduced"]
# Under pytest-xdist, the tests reading `trained` run on one worker, which measures each build once.
# The others read only what the builder cached (locked while a worker builds it) and run on either.
MEASURED_BUILDS = pytest.mark.xdist_group("embedded_drafters")


@pytest.fixture(scope="module")
def built() -> dict[str, Path]:
    return {mechanism: ensure_drafter(mechanism, "reduced") for mechanism in EMBEDDED_DRAFTERS}


@pytest.fixture(scope="module")
def samples():
    return _answers(ensure_smollm2(), REDUCED)  # generated once, cached (the builds start from them)


# Trained in a child process, as the builder does: vLLM, run in this process by the other tests,
# pins this process's threads, which makes torch training here many times slower.
_TRAIN = """
import sys
from dataclasses import replace
from pathlib import Path
from evals.embedded_drafters import BUDGETS, _train, training_samples
from evals.embedded_target import ensure_smollm2
mechanism, steps, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
budget = replace(BUDGETS["reduced"], head_steps=steps, draft_steps=steps)
_train(mechanism, ensure_smollm2(), *training_samples(ensure_smollm2(), budget), out, budget)
"""


def _train(mechanism: str, steps: int, out: Path) -> Path:
    """The builder's trainer on the cached reduced answers, ``steps`` steps (0: its untrained start)."""
    subprocess.run(
        [sys.executable, "-c", _TRAIN, mechanism, str(steps), str(out)], check=True, stdout=subprocess.DEVNULL
    )
    return out


def _weights_digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


EVALUATED = ["dataset=mt_bench", "dataset.num_requests=6", "sampling.max_tokens=48", "d=3", "engine.dtype=float32"]


@pytest.fixture(scope="module")
def trained(built, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Each built drafter measured once: its run dir and summary."""
    runs = {}
    for mechanism, folder in built.items():
        out = tmp_path_factory.mktemp(f"trained-{EMBEDDED_DRAFTERS[mechanism]}")
        runs[mechanism] = (out, measure(out, *EVALUATED, *BUILD_OVERRIDES[mechanism], f"drafter.model={folder}"))
    return runs


@pytest.fixture(scope="module")
def plain_answers(tmp_path_factory) -> dict[tuple[str, int], list[int]]:
    """Plain decoding of the evaluated prompts, once for both builds (what baseline=true would run
    beside each, and its zero-cost timing pass, which nothing here reads)."""
    out = tmp_path_factory.mktemp("plain")
    measure(out, *EVALUATED, "drafter=none")
    return answers_in(out)


def answers_in(run_dir: Path) -> dict[tuple[str, int], list[int]]:
    return {(row["request_id"], row["turn"]): row["token_ids"] for row in read_outputs(run_dir / "outputs.jsonl")}


@MEASURED_BUILDS
@pytest.mark.parametrize("mechanism", list(EMBEDDED_DRAFTERS))
def test_a_reduced_build_beats_its_untrained_start_in_vllm(trained, plain_answers, tmp_path, mechanism):
    overrides = [*EVALUATED, *BUILD_OVERRIDES[mechanism]]
    summary = trained[mechanism][1]
    untrained_dir = _train(mechanism, 0, tmp_path / f"untrained-{EMBEDDED_DRAFTERS[mechanism]}")
    untrained = measure(tmp_path / "untrained", *overrides, f"drafter.model={untrained_dir}")
    # Untrained, nothing is accepted (the draft model's kept layers agree with the target ~1% of the time).
    assert untrained["al"] < 1.05
    assert summary["al"] > untrained["al"] + 0.05
    # vLLM loaded it as it is, and greedy speculation with it stayed lossless (float32: every token).
    assert answers_in(trained[mechanism][0]) == plain_answers
    assert len({request for request, _ in plain_answers}) == summary["n_requests"]
    assert all(len(answer) > 0 for answer in plain_answers.values())


@MEASURED_BUILDS
@pytest.mark.parametrize("mechanism", list(EMBEDDED_DRAFTERS))
def test_the_build_record_says_what_was_trained_and_the_stamp_carries_it(built, trained, mechanism):
    facts = read_drafter_facts(built[mechanism])
    assert facts["mechanism"] == mechanism and facts["budget"] == "reduced"
    assert facts["corpus"]["name"] == CORPUS["name"]
    chosen = training_set(ensure_smollm2(), REDUCED)
    assert facts["corpus"]["dropped_recitations"] == chosen.dropped
    assert (
        facts["corpus"]["training_prompts"] + facts["corpus"]["heldout_prompts"] + sum(chosen.dropped.values())
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
    # A run drafting with it stamps the build record (the report shows it from there).
    stamp = json.loads((trained[mechanism][0] / "stamp.json").read_text())
    assert stamp["draft_build"] == facts


# Generated again in a child process pinned to one core, with the in-process engine setting this test
# process has: what a build on a machine with fewer cores, or from a pinned caller, would do. Every
# prompt (a slice was tried: the child's start-up and its 96 decode steps cost the same for 14 as for 56).
_REGENERATE = """
import json, os
from drafters.training.selfdistill import generate_answers
from evals.embedded_drafters import BUDGETS, _prompts
from evals.embedded_target import ensure_smollm2
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
def test_training_again_from_the_cached_answers_gives_the_same_bytes(tmp_path, mechanism):
    built = ensure_drafter(mechanism, "reduced")
    steps = REDUCED.head_steps if mechanism == "eagle3" else REDUCED.draft_steps
    again = _train(mechanism, steps, tmp_path / f"again-{EMBEDDED_DRAFTERS[mechanism]}")
    assert _weights_digest(again) == _weights_digest(built)
    assert (built / DRAFTER_FACTS_FILE).is_file()


_AGREEMENT = """
import json, sys
from pathlib import Path
from drafters.training.eagle3_head import head_agreement
from evals.embedded_drafters import BUDGETS, training_samples
from evals.embedded_target import ensure_smollm2
_, heldout = training_samples(ensure_smollm2(), BUDGETS["reduced"])
print(json.dumps(head_agreement(ensure_smollm2(), Path(sys.argv[1]), {"heldout": heldout})["heldout"]))
"""


def test_the_heads_recorded_agreement_comes_back_from_its_saved_weights():
    head = ensure_drafter("eagle3", "reduced")
    # In a child process for the same reason as _train.
    proc = subprocess.run([sys.executable, "-c", _AGREEMENT, str(head)], check=True, capture_output=True, text=True)
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert again == read_drafter_facts(head)["heldout_greedy_agreement"]
    assert len(again) == 3 and again[0] > 0.0


@MEASURED_BUILDS
def test_the_parallel_draft_model_is_measured_at_each_d_and_stays_lossless(built, trained, plain_answers, tmp_path):
    """drafter.parallel_drafting=true on the embedded parallel draft model: one measured run per D,
    three measured curve points on a line of their own, and greedy speculation at every D gives
    plain decoding's tokens (float32)."""
    import shutil

    from reports.curves import collect

    mechanism = "draft_model_parallel"
    sweep = tmp_path / "sweep"
    shutil.copytree(trained[mechanism][0], sweep / "d3")
    others = [o for o in EVALUATED if not o.startswith("d=")]
    for d in (1, 5):
        measure(sweep / f"d{d}", *others, f"d={d}", *BUILD_OVERRIDES[mechanism], f"drafter.model={built[mechanism]}")
    for d in (1, 3, 5):
        assert answers_in(sweep / f"d{d}") == plain_answers, d
        profile = json.loads((sweep / f"d{d}" / "speculation_profile.json").read_text())["profiles"][0]
        assert profile["measured_per_k"] is True and list(profile["acceptance_length_by_k"]) == [str(d)]
    curves = collect(sweep)
    whole = curves[curves.domain == "all"]
    assert sorted(whole.d) == [1, 3, 5]
    assert set(whole.source) == {"measured"} and set(whole.setting) == {"drafter.parallel_drafting=true"}
    assert all(1.0 < al <= 1 + d for al, d in zip(whole.al, whole.d, strict=True))


@MEASURED_BUILDS
def test_a_w8a8_copy_of_the_head_runs_in_vllm_and_is_labelled(built, trained, plain_answers, tmp_path):
    """evals.quantize's copy of the head (its decoder layer and `fc` int8) is read by vLLM's CPU
    build as int8 (weights read as floats would accept nothing), and its runs say so."""
    from evals.quantize import main as quantize

    quantized = tmp_path / "head-w8a8"
    assert quantize([str(built["eagle3"]), "--out", str(quantized)]) == 0
    out = tmp_path / "run"
    summary = measure(out, *EVALUATED, "drafter=eagle3", f"drafter.model={quantized}")
    assert summary["al"] > 1.05
    assert answers_in(out) == plain_answers
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["quantization"] == {"target": None, "draft": "w8a8"}
