from pathlib import Path

import pytest

INTEGRATION = Path(__file__).parent / "integration"


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", help="run tests marked gpu (needs CUDA)")


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
