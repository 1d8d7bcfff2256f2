"""The nightly re-measurement on CPU: a tiny target, a draft distilled for it, and the same target
fine-tuned on different text, which the draft no longer predicts."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from evals.nightly import nightly, parse_args
from tests.fixtures.models import (
    fixture_info,
    tiny_draft,
    tiny_target,
    tiny_target_finetuned,
)


def night(tmp_path: Path, label: str, target: Path, baseline: str | None = None) -> tuple[int, float]:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "common: [target=custom, dataset=mt_bench, dataset.num_requests=8, sampling.max_tokens=48,"
        " engine.dtype=float32, engine.cpu_kvcache_space_gib=1, engine.max_model_len=1024]\n"
        f"jobs:\n  draft_model_d3: [drafter=draft_model, 'drafter.model={tiny_draft()}', d=3]\n"
        "threshold: 0.1\n"
    )
    argv = [f"suite={suite}", f"night={label}", f"out={tmp_path / 'nights' / label}", f"target.model={target}"]
    if baseline:
        argv.append(f"baseline={tmp_path / 'nights' / baseline}")
    start = time.perf_counter()
    status = nightly(parse_args(argv))
    return status, time.perf_counter() - start


def test_nightly_catches_the_finetuned_target_and_passes_the_unchanged_one(tmp_path, capsys):
    original, tuned = tiny_target(), tiny_target_finetuned()
    assert fixture_info(tuned)["draft_agreement"] < fixture_info(tiny_draft())["greedy_agreement"] - 0.15

    assert night(tmp_path, "n1", original)[0] == 0
    status, unchanged_s = night(tmp_path, "n2", original, "n1")
    assert status == 0
    capsys.readouterr()
    status, tuned_s = night(tmp_path, "n3", tuned, "n1")
    assert status == 1
    err = capsys.readouterr().err
    assert "REGRESSION drafter=draft_model d=3 domain=all" in err

    history = pd.read_parquet(tmp_path / "nights" / "history.parquet")
    n2 = history[(history.night == "n2") & (history.domain == "all")].iloc[0]
    assert n2.al_diff == 0.0 and not n2.regressed
    n3 = history[(history.night == "n3") & (history.domain == "all")].iloc[0]
    assert n3.al_diff < -0.1 and n3.diff_ci95_hi < 0 and n3.regressed
    assert n3.target_fingerprint != n2.target_fingerprint
    print(
        f"nightly wall time on CPU (one job, 8 prompts, 48 tokens): unchanged {unchanged_s:.1f} s, "
        f"fine-tuned {tuned_s:.1f} s"
    )
