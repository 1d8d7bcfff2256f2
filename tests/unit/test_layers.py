"""The house's import layering (tests/layers.py, docs/architecture.md) holds in the code, and
the check finds a planted upward import, a sideways one, a file loop and a folder loop."""

from __future__ import annotations

from pathlib import Path

from tests.layers import LAYERS, file_loops, folder_loops, import_graph, layer_violations

ROOT = Path(__file__).resolve().parents[2]


def test_no_import_climbs_a_layer_and_no_files_import_each_other_in_a_loop():
    graph = import_graph(ROOT)
    assert {module.split(".")[0] for module in graph} == set(LAYERS)
    assert sum(map(len, graph.values())) > 300  # the graph is read, not empty
    assert [str(v) for v in layer_violations(graph)] == []
    assert file_loops(graph) == []
    assert folder_loops(ROOT) == []  # nor do folders: a sub-package never imports its parent's files back


def plant(root: Path, files: dict[str, str]) -> Path:
    for top in LAYERS:
        (root / top).mkdir(parents=True, exist_ok=True)
        (root / top / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_a_planted_upward_import_a_sideways_one_and_a_loop_are_each_found(tmp_path):
    root = plant(
        tmp_path,
        {
            "speclens/errors.py": "def f():\n    from reports import table  # inside a function counts too\n",
            "reports/table.py": "from speclens import errors\n",
            "drafters/ngram.py": "import runners.engine\n",
            "runners/engine.py": "from . import chat\n",
            "runners/chat.py": "from runners.engine import x\n",
        },
    )
    graph = import_graph(root)
    assert [(v.module, v.imported) for v in layer_violations(graph)] == [
        ("drafters.ngram", "runners.engine"),
        ("speclens.errors", "reports"),
        ("speclens.errors", "reports.table"),
    ]
    assert file_loops(graph) == [["reports.table", "speclens.errors"], ["runners.chat", "runners.engine"]]


def test_a_planted_folder_loop_is_found_though_no_files_loop(tmp_path):
    root = plant(
        tmp_path,
        {
            "speclens/config.py": "from speclens.formats import serve\n",
            "speclens/errors.py": "",
        },
    )
    (root / "speclens" / "formats").mkdir()
    (root / "speclens" / "formats" / "__init__.py").write_text("")
    (root / "speclens" / "formats" / "serve.py").write_text("from speclens import errors\n")
    assert file_loops(import_graph(root)) == []
    assert folder_loops(root) == [["speclens", "speclens.formats"]]


def test_no_two_classes_share_a_name():
    """One name per concept (issues 60 and 66): a class name said once in the tree, so a reader who
    meets `Measured` or `Acceptance` knows which it is."""
    import ast
    from collections import defaultdict

    from tests.layers import project_modules

    where: dict[str, list[str]] = defaultdict(list)
    for module, path in project_modules(ROOT).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(module)
    shared = {name: modules for name, modules in where.items() if len(modules) > 1}
    assert shared == {}
