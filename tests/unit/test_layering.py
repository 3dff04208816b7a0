"""The architecture the folder tree promises: the engine imports no Airflow, only the state store
talks to ZooKeeper through kazoo, and the engine's packages import only those before them in the
pipeline, with no import cycle anywhere (imports inside functions count)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def files(*folders: str):
    return [p for f in folders for p in (ROOT / f).rglob("*.py")]


def test_the_engine_imports_no_airflow():
    offenders = [str(p.relative_to(ROOT)) for p in files("include/dblog")
                 if any(m == "airflow" or m.startswith("airflow.") for m in imported_modules(p))]
    assert not offenders, offenders


def reaches_past_the_store(path: Path) -> bool:
    """Imports kazoo, or uses a store's kazoo client (`store.zk`)."""
    uses_client = any(isinstance(n, ast.Attribute) and n.attr == "zk" for n in ast.walk(ast.parse(path.read_text())))
    return uses_client or any(m == "kazoo" or m.startswith("kazoo.") for m in imported_modules(path))


def test_only_the_state_store_talks_to_kazoo():
    offenders = [str(p.relative_to(ROOT)) for p in files("include/dblog", "plugins", "dags", "spark_jobs")
                 if p != ROOT / "include/dblog/coordination/store.py" and reaches_past_the_store(p)]
    assert not offenders, offenders


def module_level_imports(path: Path) -> set[str]:
    """Imports that run when the module loads (not those inside a function or class)."""
    names = set()
    for node in ast.walk(ast.Module(body=[n for n in ast.parse(path.read_text()).body
                                          if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))],
                                    type_ignores=[])):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def is_dev(module: str) -> bool:
    return module == "dblog_dev" or module.startswith("dblog_dev.")


def test_the_engine_never_loads_the_development_package_unless_dblog_local_asks_for_it():
    at_load = [str(p.relative_to(ROOT)) for p in files("include/dblog") if any(map(is_dev, module_level_imports(p)))]
    assert not at_load, at_load
    # Only the configuration reaches it, from inside the functions that check DBLOG_LOCAL first.
    anywhere = [str(p.relative_to(ROOT)) for p in files("include/dblog") if any(map(is_dev, imported_modules(p)))]
    assert anywhere == ["include/dblog/connections.py"], anywhere


def test_only_the_local_airflow_settings_use_the_development_package_among_deployed_parts():
    offenders = [str(p.relative_to(ROOT)) for p in files("plugins", "dags", "spark_jobs")
                 if p != ROOT / "plugins/dblog_airflow/local.py" and any(map(is_dev, imported_modules(p)))]
    assert not offenders, offenders


# -- the pipeline's order ------------------------------------------------------------------------
# Lowest first: a module may import its own layer and those before it, never one after it. A layer
# is a package of include/dblog or one of its top-level modules.
LAYERS = ["errors", "settings", "faults", "model", "storage", "sources", "connections", "retry", "stagedlog",
          "coordination", "warehouse", "spark", "snapshot", "capture", "merge", "operations", "cli"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT / "include").with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict[str, Path]:
    """The engine's modules and the development package's, by dotted name."""
    return {module_name(p): p for p in files("include/dblog", "include/dblog_dev")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports anywhere in its file: relative imports resolved,
    `from package import module` read as the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return found & known


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    modules = our_modules() if modules is None else modules
    known = set(modules)
    return {name: imports_of(name, path, known) - {name} for name, path in modules.items()}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "dblog" and len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {i}" for m, imported in graph.items() if layer(m) in LAYERS
                  for i in imported if layer(i) in LAYERS and LAYERS.index(layer(i)) > LAYERS.index(layer(m)))


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Some import cycle of the graph, as the modules along it (first == last), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for nxt in sorted(graph.get(module, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [module, nxt] if nxt in path else [module, nxt]
            if nxt not in state and (found := visit(nxt, path + [module])):
                return found
        state[module] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_every_engine_package_and_top_level_module_has_its_place_in_the_pipeline_order():
    unplaced = sorted({layer(m) for m in our_modules() if m.startswith("dblog.")} - set(LAYERS))
    assert not unplaced, f"add {unplaced} to LAYERS where they belong in the pipeline"


def test_no_engine_module_imports_a_stage_that_comes_after_its_own():
    assert upward_imports(import_graph()) == []


def test_no_module_of_the_engine_or_the_development_package_is_part_of_an_import_cycle():
    assert a_cycle(import_graph()) is None


@pytest.mark.parametrize("importer, imported, back", [
    ("dblog.model.rules", "dblog.capture.capture_loop", "from ..capture import capture_loop\n"),
    ("dblog.coordination.store", "dblog.snapshot.dump", "def f():\n    from ..snapshot.dump import run_dump\n"),
])
def test_a_back_import_even_inside_a_function_breaks_the_order_and_closes_a_cycle(importer, imported, back, tmp_path):
    """The checks above bite: one added line that imports backwards is reported twice."""
    modules = our_modules()
    patched = tmp_path / "patched.py"
    patched.write_text(modules[importer].read_text() + "\n" + back)
    graph = import_graph(modules)
    graph[importer] = imports_of(importer, patched, set(modules)) - {importer}
    assert f"{importer} -> {imported}" in upward_imports(graph)
    cycle = a_cycle(graph)
    assert cycle is not None and importer in cycle, cycle
