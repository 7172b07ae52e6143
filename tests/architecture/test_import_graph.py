"""The package's modules import one another in one direction only.

Every import statement counts, wherever it is (module level, inside a function, under
`if TYPE_CHECKING:`): an import moved into a function to dodge a cycle still makes one.
`kernels/` and `models/` install inside the package as dllm_lsp.kernels and
dllm_lsp.shipped_models, so they are part of the graph too.

Direction is checked where a cycle test cannot see it: model code (arch/, checkpoints/, the
loader, the kernels) takes from the engine only the port module and the types it needs, never a
decode loop (an edge with no edge back is no cycle, yet it is the model depending on the loop).
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


# The model side: the ports' implementations, their loader and the kernels they call.
MODEL_SIDE = ("dllm_lsp.arch", "dllm_lsp.checkpoints", "dllm_lsp.loader", "dllm_lsp.model_folder", "dllm_lsp.kernels")
# What the model side may take from the engine: the port module (Denoiser, BlockDiffusionPort,
# BlockStep, Canvas, SpecialTokens), the settings types and the CUDA-graph helper. Not a loop
# module (denoise, blockwise, variable_length, batching, engine, ...): the engine calls the model,
# never the other way round.
ENGINE_FOR_MODELS = frozenset({"dllm_lsp.engine", "dllm_lsp.engine.denoiser", "dllm_lsp.engine.types",
                               "dllm_lsp.engine.cuda_graph"})


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def upward_imports(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, engine module) pairs where a model-side module, or an engine module the model
    side may import, imports an engine module outside ENGINE_FOR_MODELS (directly: the allowed
    modules' own imports are checked too, so nothing reaches a loop through them)."""
    importers = [m for m in edges if _within(m, MODEL_SIDE) or m in ENGINE_FOR_MODELS]
    return sorted((m, t) for m in importers for t in edges[m]
                  if _within(t, ("dllm_lsp.engine",)) and t not in ENGINE_FOR_MODELS)


def test_models_import_no_engine_loop():
    edges = graph()
    assert set(ENGINE_FOR_MODELS) <= set(edges), "an allowed engine module was renamed: update ENGINE_FOR_MODELS"
    assert "dllm_lsp.checkpoints.block_denoiser" in edges and "dllm_lsp.arch.embedded_denoiser" in edges
    found = upward_imports(edges)
    assert not found, "model code imports the engine's loops: " + ", ".join(f"{m} -> {t}" for m, t in found)


def test_the_direction_check_finds_a_model_importing_a_loop():
    edges = {"dllm_lsp.checkpoints.block_denoiser": {"dllm_lsp.engine.blockwise", "dllm_lsp.engine.denoiser"},
             "dllm_lsp.engine.denoiser": {"dllm_lsp.engine.types"},
             "dllm_lsp.engine.types": set(),
             "dllm_lsp.engine.blockwise": {"dllm_lsp.engine.denoiser"}}
    assert upward_imports(edges) == [("dllm_lsp.checkpoints.block_denoiser", "dllm_lsp.engine.blockwise")]
    edges["dllm_lsp.engine.denoiser"].add("dllm_lsp.engine.denoise")
    assert ("dllm_lsp.engine.denoiser", "dllm_lsp.engine.denoise") in upward_imports(edges)
