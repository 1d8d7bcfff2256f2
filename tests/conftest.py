import json
import os
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).parent / "integration"


def _bind_worker_to_one_core() -> None:
    """Under pytest-xdist (`make test`'s unit tests on two cores or more), each worker on a core of
    its own, its child processes and any vLLM engine's threads with it: two engines spreading their
    threads over the same cores spin against each other (measured: two unbound workers took 1.8x the
    wall time of one process on tests/integration/test_mechanisms.py)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[int(worker.removeprefix("gw")) % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu)
    os.environ["OMP_NUM_THREADS"] = "1"


_bind_worker_to_one_core()


def _check_written_json_against_the_schemas() -> None:
    """Every JSON file of a format speclens writes (summary.json, stamp.json, serve.json, ...) is
    validated, as it is written anywhere in the suite's process, against its JSON Schema in
    docs/schemas/ (speclens/file_formats/schemas.py): a writer that drifts from the declared records
    fails the test that wrote the file."""
    import jsonschema

    from speclens import files
    from speclens.file_formats.schemas import DOCS_FOLDER, FORMATS, schema_name

    validators: dict[str, jsonschema.Draft202012Validator] = {}
    write = files.json_text

    def checked(data, path):
        name = Path(path).name
        if name in FORMATS and not name.startswith("."):
            if name not in validators:
                schema = json.loads((DOCS_FOLDER / schema_name(name)).read_text())
                validators[name] = jsonschema.Draft202012Validator(schema)
            error = next(iter(validators[name].iter_errors(data)), None)
            if error is not None:
                where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
                raise AssertionError(
                    f"{path} breaks docs/schemas/{schema_name(name)} at {where or '/'}: {error.message}"
                )
        return write(data, path)

    files.json_text = checked


_check_written_json_against_the_schemas()


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", help="run tests marked gpu (needs CUDA)")
    parser.addoption(
        "--times-file",
        default=None,
        help="write each test's seconds (set-up, call and tear-down together) to this JSON file "
        "(read by tests/suite_time.py for `make test`'s closing line)",
    )


# Each test's seconds: its set-up (where shared fixtures are built), call and tear-down; and the
# xdist worker that ran it ("main" without xdist), whose chain of tests makes the critical path.
_SECONDS: dict[str, float] = {}
_WORKER: dict[str, str] = {}


def pytest_runtest_logreport(report):
    _SECONDS[report.nodeid] = _SECONDS.get(report.nodeid, 0.0) + report.duration
    node = getattr(report, "node", None)  # set by xdist on the reports the controller hears
    _WORKER[report.nodeid] = node.gateway.id if node is not None else "main"


def pytest_sessionfinish(session):
    path = session.config.getoption("--times-file")
    # The controller hears every worker's reports. A worker is told by its config, not by the
    # environment: a pytest started by a test on a worker inherits PYTEST_XDIST_WORKER.
    if path and not hasattr(session.config, "workerinput"):
        # Added to what an earlier session wrote there (`make test` runs two and removes it first).
        earlier = json.loads(Path(path).read_text()) if Path(path).is_file() else []
        rows = {row["test"]: row for row in earlier}
        rows.update(
            (test, {"test": test, "seconds": round(s, 3), "worker": _WORKER[test]}) for test, s in _SECONDS.items()
        )
        ranked = sorted(rows.values(), key=lambda row: -row["seconds"])
        Path(path).write_text(json.dumps(ranked, indent=1))


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection
def pytest_collection_modifyitems(config, items):
    # The `integration` marker by folder: a conftest's `pytestmark` marks nothing (pytest reads it
    # only in test modules), so `-m "not integration"` would still collect every vLLM test.
    for item in items:
        if INTEGRATION in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)
    if config.getoption("--run-gpu"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: run with --run-gpu on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
