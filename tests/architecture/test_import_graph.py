"""The package's modules import one another in one direction only.

Every import statement counts, wherever it is (module level, inside a function, under
`if TYPE_CHECKING:`): an import moved into a function to dodge a cycle still makes one.
`kernels/` and `models/` install inside the package as dllm_lsp.kernels and
dllm_lsp.shipped_models, so they are part of the graph too.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"dllm_lsp": REPO / "dllm_lsp", "dllm_lsp.kernels": REPO / "kernels"}


def modules() -> dict[str, Path]:
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lies in (a.b.c -> a.b when c is a function)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # `from pkg import mod` imports pkg.mod when it is a module, else a name in pkg
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            target = resolve(name, known)
            if target is not None and target != module:
                out.add(target)
    # Importing a.b.c runs a/__init__ and a/b/__init__ first; those edges are real as well, but a
    # package's __init__ importing its own submodules is how packages work, not a cycle.
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports_of(module, path, known) for module, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def without_package_inits(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop a package __init__'s edges to its own submodules (re-exports), which every
    `from pkg.sub import x` would otherwise turn into a cycle through pkg."""
    return {m: {t for t in targets if not t.startswith(m + ".")} for m, targets in edges.items()}


def test_the_graph_is_read():
    edges = graph()
    assert "dllm_lsp.server.app" in edges
    assert "dllm_lsp.engine.engine" in edges["dllm_lsp.pipeline"]


def test_no_import_cycle():
    cycle = find_cycle(without_package_inits(graph()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
