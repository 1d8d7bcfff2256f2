"""The import layering of docs/architecture.md, read from the code's own AST.

A module may import its own top-level folder's modules (without a file loop) and the folders of
lower layers; folders of one layer do not import each other. Every import counts, also those
inside functions.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# Top-level folder -> layer; higher layers import lower ones only.
LAYERS = {
    "speclens": 0,  # the foundation: imports nothing of the project
    "drafters": 1,
    "runners": 1,
    "reports": 2,
    "evals": 3,  # the pipeline and the command-line entry points
    "benchmarks": 4,
}


@dataclass(frozen=True)
class Violation:
    module: str
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.module} imports {self.imported}: {self.why}"


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the layered folders, by dotted name."""
    found = {}
    for top in LAYERS:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports (`from a import b` is a.b where that is a module)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            names += [f"{stem}.{alias.name}" if stem else alias.name for alias in node.names] + [stem]
    return {resolved for name in names if (resolved := resolve(name, modules)) and resolved != module}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)


def layer_violations(graph: dict[str, set[str]]) -> list[Violation]:
    out = []
    for module, imported in sorted(graph.items()):
        top = module.split(".")[0]
        for other in sorted(imported):
            other_top = other.split(".")[0]
            if other_top == top:
                continue
            if LAYERS[other_top] > LAYERS[top]:
                out.append(Violation(module, other, f"{other_top}/ is a higher layer than {top}/"))
            elif LAYERS[other_top] == LAYERS[top]:
                out.append(
                    Violation(module, other, f"{top}/ and {other_top}/ are one layer: neither imports the other")
                )
    return out


def file_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))
    return sorted(loops)


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def folder_loops(root: Path) -> list[list[str]]:
    """Loops between folders, each sub-package a folder of its own (`speclens`, `speclens.figures`):
    a folder's files importing a sub-package that imports them back, directly or round others."""
    modules = project_modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        here = _folder(module, path)
        for other in imports_of(module, path, modules):
            there = _folder(other, modules[other])
            if there != here:
                graph.setdefault(here, set()).add(there)
    return file_loops(graph)


def _folder(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]
