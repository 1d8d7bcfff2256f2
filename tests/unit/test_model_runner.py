"""Which vLLM model runner a run is computed on (runners/model_runner.py): the choice, its refusals,
and the verify pass that follows it (evals/pipeline/passes.py zero_cost_spec)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evals.pipeline.passes import zero_cost_spec
from runners.model_runner import V1_ONLY_METHODS, check_shared, choose, runner_in_use
from runners.zero_cost_proposer import CLASS_PATH
from speclens.errors import ConfigError


@pytest.mark.parametrize(
    ("requested", "method", "has_triton", "expected"),
    [
        ("auto", "eagle3", True, "v2"),
        ("auto", None, True, "v2"),
        ("auto", "suffix", True, "v1"),  # V2 has no suffix: the whole run on V1
        ("auto", "eagle3", False, "v1"),  # the CPU build: no Triton
        ("v1", "ngram", True, "v1"),
        ("v2", "ngram", True, "v2"),
    ],
)
def test_the_run_takes_vllms_runner_unless_asked_for_another(requested, method, has_triton, expected):
    assert choose(requested, method, has_triton) == expected


def test_a_runner_that_cannot_run_the_pass_is_refused_in_one_line():
    with pytest.raises(
        ConfigError, match=r"Model Runner V2 has no speculative method 'suffix'.*engine.model_runner=v1"
    ):
        choose("v2", "suffix", True)
    with pytest.raises(ConfigError, match=r"needs Triton.*the CPU build always runs V1"):
        choose("v2", "ngram", False)
    with pytest.raises(ConfigError, match=r"engine.model_runner=v3: choose one of auto, v1, v2"):
        choose("v3", None, True)
    # a later pass of a run on V2 with a V1-only method (the V1 verify pass's custom class)
    with pytest.raises(ConfigError, match=r"Model Runner V2, which has no speculative method 'custom_class'"):
        check_shared("v2", "custom_class")
    check_shared("v1", "custom_class")


def test_the_verify_pass_runs_on_the_runs_runner():
    assert zero_cost_spec(3, "v1") == {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": 3}
    v2 = zero_cost_spec(3, "v2")
    assert v2["method"] not in V1_ONLY_METHODS and v2["num_speculative_tokens"] == 3
    assert zero_cost_spec(3, None)["method"] == "custom_class"  # the fake and servers: as before


def test_the_runner_in_use_is_read_from_the_workers_model_runner_class():
    v2 = type("GPUModelRunner", (), {"__module__": "vllm.v1.worker.gpu.model_runner"})()
    v1 = type("CPUModelRunner", (), {"__module__": "vllm.v1.worker.cpu_model_runner"})()
    assert (runner_in_use(v2), runner_in_use(v1), runner_in_use(None)) == ("v2", "v1", None)


def test_a_launched_server_gets_the_runner_asked_for_and_an_attached_one_cannot(tmp_path):
    from evals.pipeline.compose import to_run_config
    from runners.server_runner import check_support, numerics_env
    from tests.unit.conftest import compose_run, fake_overrides
    from tests.unit.test_commands_fake import ROWS

    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), "runner=server"))
    assert "VLLM_USE_V2_MODEL_RUNNER" not in numerics_env(cfg)  # auto: the server's vLLM chooses
    cfg.engine.model_runner = "v1"
    assert numerics_env(cfg)["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    cfg.engine.model_runner = "v2"
    assert numerics_env(cfg)["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    attached = to_run_config(
        compose_run(
            *fake_overrides(tmp_path, ROWS), "runner=server", "runner.url=http://127.0.0.1:9", "engine.model_runner=v1"
        )
    )
    with pytest.raises(
        ConfigError, match=r"^engine\.model_runner=v1 with runner\.url: an attached server's model runner"
    ):
        check_support(attached, speculative=True)


def test_the_result_table_and_the_reports_runs_table_name_the_runner_that_measured(tmp_path):
    import json

    from reports.build import runs_section
    from reports.runs import find_runs
    from reports.table import result_table
    from tests.unit.test_curves import sweep

    root = sweep(tmp_path, [("ngram", 1), ("ngram", 2)])
    assert runs_section(find_runs(root)).tables[0][0][-1] == "speedup"  # the fake shows no runner: no column
    path = root / "drafter=ngram,d=2" / "summary.json"
    summary = json.loads(path.read_text())
    summary["numerics"]["model_runner"] = "v2"  # as an in-process run on CUDA records it
    path.write_text(json.dumps(summary))
    header, rows = runs_section(find_runs(root)).tables[0]
    assert header[-1] == "model runner" and sorted(row[-1] for row in rows) == ["-", "v2"]
    run = next(r for r in find_runs(root) if r.summary.d == 2)
    assert "(vLLM model runner V2)" in result_table(run.summary)


def test_the_gpu_selfcheck_compares_a_measured_ngram_run_with_its_runners_replayed_proposer(tmp_path):
    import pandas as pd

    from evals.selfcheck import replay_check
    from reports.runs import find_runs
    from tests.unit.test_curves import sweep

    summary = find_runs(sweep(tmp_path, [("ngram", 2)]))[0].summary
    summary = replace(summary, numerics=replace(summary.numerics, model_runner="v2"))
    rows = [
        {"domain": "all", "segment": "all", "d": 2, "proposer": "v1", "al": summary.al + 0.3},
        {"domain": "all", "segment": "all", "d": 2, "proposer": "v2", "al": summary.al},
    ]
    check = replay_check("n-gram", summary, pd.DataFrame(rows))
    assert check.passed and f"model runner v2: measured AL {summary.al:.4f}" in check.detail
    # the same run read as V1's: V1's proposer's point differs
    summary = replace(summary, numerics=replace(summary.numerics, model_runner="v1"))
    assert not replay_check("n-gram", summary, pd.DataFrame(rows)).passed


def test_an_unknown_model_runner_is_refused_whatever_the_runner_and_leaves_no_run_dir(tmp_path, capsys):
    """Issue 56: `engine.model_runner=v3` passed with runner=fake (only vLLM's runners checked it)."""
    from evals.run import main
    from tests.unit.conftest import fake_overrides
    from tests.unit.test_commands_fake import ROWS

    out = tmp_path / "run"
    overrides = [*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", "engine.model_runner=v3"]
    with pytest.raises(SystemExit) as ended:  # a Hydra job reports its failure, then exits with its status
        main([*overrides, f"hydra.run.dir={out}"])
    assert ended.value.code == 2 and not out.exists()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == "speclens: error: engine.model_runner=v3: choose one of auto, v1, v2."
