"""The layout's two rules, checked over the import graph of the source tree (read with ``ast``, nothing imported):
no module imports itself back at import time, and packages point one way — a lower package never imports a
higher one, not even inside a function (a deferred import that dodges a cycle means a piece sits in the wrong
layer)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("corpus", "trainer", "cli")

#: Each package (or top-level module) and the packages it may import besides itself, lowest layers first.
#: ``cli`` is the skin over everything and may import anything.
LAYERS: dict[str, tuple[str, ...]] = {
    "corpus": (),  # the package faces import nothing
    "trainer": (),
    "corpus.core": (),
    "corpus.storage": ("corpus.core",),
    "corpus.indexed": ("corpus.core", "corpus.storage"),
    "corpus.readers": ("corpus.core", "corpus.storage"),
    "corpus.tokenizers": ("corpus.core", "corpus.indexed"),
    "corpus.tokenize": ("corpus.core", "corpus.storage", "corpus.indexed", "corpus.readers", "corpus.tokenizers"),
    "corpus.autotune": ("corpus.core", "corpus.storage", "corpus.readers", "corpus.tokenizers", "corpus.tokenize"),
    "corpus.inspect": ("corpus.core", "corpus.storage", "corpus.indexed", "corpus.tokenizers"),
    "corpus.blending": ("corpus.core", "corpus.storage", "corpus.indexed", "corpus.tokenizers", "corpus.inspect"),
    "trainer.errors": ("corpus.core",),
    "trainer.config": ("corpus.core", "corpus.tokenizers", "corpus.blending", "trainer.errors"),
    "trainer.runtime": ("corpus.core", "trainer.errors", "trainer.config"),
    "trainer.kernels": ("corpus.core",),
    "trainer.parallel": ("corpus.core", "trainer.errors", "trainer.config"),
    "trainer.model": ("corpus.core", "trainer.errors", "trainer.config", "trainer.kernels", "trainer.parallel"),
    "trainer.fp8": ("corpus.core", "trainer.errors", "trainer.config", "trainer.kernels", "trainer.model"),
    "trainer.optim": ("corpus.core", "trainer.errors", "trainer.config", "trainer.kernels"),
    "trainer.parallelize": ("corpus.core", "trainer.errors", "trainer.config", "trainer.runtime", "trainer.kernels",
                            "trainer.parallel", "trainer.model", "trainer.fp8"),
    "trainer.checkpoint": ("corpus.core", "corpus.tokenizers", "trainer.errors", "trainer.config",
                           "trainer.parallel", "trainer.model"),
    "trainer.run": ("corpus", "trainer"),
    "cli": ("corpus", "trainer"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for root in ROOTS for path in (REPO / root).rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or (
        isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported module of this tree, whether the import runs when the module is imported) of every import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, at_import_time: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue  # annotations only: never executed
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, at_import_time) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                for alias in child.names:
                    target = f"{base}.{alias.name}"
                    found.append((target if target in modules else base, at_import_time))
            visit(child, at_import_time)

    visit(ast.parse(path.read_text()), True)
    return [(target, eager) for target, eager in found if target.split(".")[0] in ROOTS and target in modules]


def _graph() -> dict[str, list[tuple[str, bool]]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(name: str) -> str:
    """The entry of :data:`LAYERS` a module belongs to (the longest matching prefix)."""
    matches = [layer for layer in LAYERS if name == layer or name.startswith(layer + ".")]
    assert matches, f"{name} belongs to no layer: add its package to LAYERS in {Path(__file__).name}"
    return max(matches, key=len)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_no_module_imports_itself_back_at_import_time():
    graph = _graph()
    edges = {name: {target for target, eager in imports if eager} for name, imports in graph.items()}
    assert _cycles(edges) == []


def test_packages_import_only_the_layers_below_them():
    wrong = []
    for name, imports in _graph().items():
        layer = _layer(name)
        allowed = (layer, *LAYERS[layer])
        for target in imports:
            target = target[0]
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                wrong.append(f"{name} -> {target}")
    assert sorted(set(wrong)) == []


def test_the_check_sees_a_cycle_and_skips_annotations():
    """The graph reader itself: a planted cycle is found, a TYPE_CHECKING import is not an edge."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    code = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trainer.model\n")
    assert not any(isinstance(node, ast.Import) for node in code.body if not isinstance(node, ast.If))
