"""The architecture the folder tree promises: the engine imports no Airflow, and only the state
store talks to ZooKeeper through kazoo."""
import ast
from pathlib import Path

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
                 if p != ROOT / "include/dblog/state.py" and reaches_past_the_store(p)]
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
    assert anywhere == ["include/dblog/config.py"], anywhere


def test_only_the_local_airflow_settings_use_the_development_package_among_deployed_parts():
    offenders = [str(p.relative_to(ROOT)) for p in files("plugins", "dags", "spark_jobs")
                 if p != ROOT / "plugins/dblog_airflow/local.py" and any(map(is_dev, imported_modules(p)))]
    assert not offenders, offenders
