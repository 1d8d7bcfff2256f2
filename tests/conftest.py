import json
import os
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).parent / "integration"


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", help="run tests marked gpu (needs CUDA)")
    parser.addoption(
        "--times-file",
        default=None,
        help="write each test's seconds (set-up, call and tear-down together) to this JSON file "
        "(read by tests/suite_time.py for `make test`'s closing line)",
    )


# Each test's seconds: its set-up (where shared fixtures are built), call and tear-down.
_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _SECONDS[report.nodeid] = _SECONDS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--times-file")
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller hears every worker's reports
        ranked = sorted(_SECONDS.items(), key=lambda item: -item[1])
        Path(path).write_text(json.dumps([{"test": test, "seconds": round(s, 3)} for test, s in ranked], indent=1))


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
