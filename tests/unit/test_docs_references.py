"""No dangling reference in the docs: every invariant cited in code, tests or docs is listed in
docs/invariants.md; every file and test that the README and each page of docs/ name exists, and
every code name that docs/invariants.md and docs/algorithm.md give; every file and test that a
docstring or comment of the engine, the Airflow side, the DAGs or the Spark jobs cites exists.
Reads files only (no service, no import of the code it checks)."""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVARIANTS = ROOT / "docs" / "invariants.md"
# The README and every page of the site.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Code whose docstrings and comments cite files and tests.
CODE = ["include", "plugins", "dags", "spark_jobs"]
# Where "invariant N" may be cited: the project's own files (not .venv/.local, not this file).
CITING = ["README.md", "docs", "include", "plugins", "dags", "spark_jobs", "scripts", "bench", "tests"]
TEXT = (".py", ".md", ".sh", ".sql", ".html", ".yaml", ".toml", ".txt")
FILE_EXT = r"py|md|sh|sql|json|png|yaml|yml|toml|txt|html|cfg|ini"
SKIP_DIRS = {".venv", ".local", "__pycache__", ".git", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
# Code names: include/dblog/<module> (engine), plugins/<module> (Airflow side), then the root.
CODE_ROOTS = [ROOT / "include" / "dblog", ROOT / "plugins", ROOT]
ELLIPSIS = "…"

CITATION = re.compile(r"\binvariants?\s+(\d+(?:\s*(?:,|and|or|-|–|to)\s*\d+)*)", re.IGNORECASE)


# -- what the docs cite --------------------------------------------------------------------------
def cited_numbers(text: str) -> set[int]:
    """Invariant numbers a text cites: "invariant 2", "invariants 1-4 and 7"."""
    out: set[int] = set()
    for match in CITATION.finditer(text):
        parts = re.findall(r"\d+|-|–|to", match.group(1))
        i = 0
        while i < len(parts):
            if i + 2 < len(parts) and parts[i + 1] in ("-", "–", "to"):
                out.update(range(int(parts[i]), int(parts[i + 2]) + 1))
                i += 3
            else:
                if parts[i].isdigit():
                    out.add(int(parts[i]))
                i += 1
    return out


def listed_invariants(text: str) -> dict[int, str]:
    """Section number -> section text of docs/invariants.md (`## N. Title`)."""
    heads = list(re.finditer(r"^## (\d+)\. .+$", text, re.MULTILINE))
    return {int(h.group(1)): text[h.start():(heads[i + 1].start() if i + 1 < len(heads) else len(text))]
            for i, h in enumerate(heads)}


def _files(base: Path):
    if base.is_file():
        yield base
        return
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            if name.endswith(TEXT):
                yield Path(dirpath, name)


def citations() -> dict[int, list[str]]:
    """Every invariant number cited in the project's files -> where (file:line)."""
    out: dict[int, list[str]] = {}
    for base in CITING:
        for path in _files(ROOT / base):
            if path.resolve() == Path(__file__).resolve():
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for number in cited_numbers(line):
                    out.setdefault(number, []).append(f"{path.relative_to(ROOT)}:{n}")
    return out


# -- the repository ------------------------------------------------------------------------------
@cache
def repo_paths() -> tuple[set[str], set[str]]:
    """(files, directories) of the repository, as paths relative to its root."""
    files, dirs = set(), set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        rel = os.path.relpath(dirpath, ROOT)
        if rel != ".":
            dirs.add(rel)
        files.update(os.path.normpath(os.path.join(rel, f)) for f in filenames)
    return files, dirs


def path_exists(token: str) -> bool:
    """A path as the docs write it: from the root, or the tail of a path (`dblog/connections.py`,
    `test_rules.py`, a name inside the layout tree of docs/development.md). Globs (`*_bench.py`) match a file."""
    token = token.strip().removeprefix("./").rstrip("/") or "."
    files, dirs = repo_paths()
    if "*" in token:
        pattern = re.compile(r"(^|/)" + re.escape(token).replace(r"\*", r"[^/]*") + "$")
        return any(pattern.search(f) for f in files)
    return any(p == token or p.endswith("/" + token) for p in files | dirs)


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _member(body: list[ast.stmt], name: str) -> ast.AST | None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            found = _member(node.body, name) or _member(getattr(node, "orelse", []), name)
            if found is not None:
                return found
    return None


def _module(parts: list[str]) -> Path | None:
    for base in CODE_ROOTS:
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def _resolve_in(path: Path, names: list[str]) -> bool:
    body: list[ast.stmt] = _tree(path).body
    for name in names:
        node = _member(body, name)
        if node is None:
            return False
        body = getattr(node, "body", [])
    return True


@cache
def _definitions() -> dict[str, list[tuple[Path, bool]]]:
    """Classes and functions of the engine and the Airflow side, by name: (file, top-level)."""
    out: dict[str, list[tuple[Path, bool]]] = {}
    for base in (ROOT / "include", ROOT / "plugins", ROOT / "dags", ROOT / "spark_jobs"):
        for path in _files(base):
            if path.suffix == ".py":
                top = set(map(id, _tree(path).body))
                for node in ast.walk(_tree(path)):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        out.setdefault(node.name, []).append((path, id(node) in top))
    return out


def code_exists(token: str, loose: bool = False) -> bool:
    """`module.name[.name]` with `/` between packages (`merge/job._rewrite`, `dblog_airflow/
    operators/wait.WaitForCaptureOperator`), modules under include/dblog, plugins or the root.
    `loose` also takes `Class.member` and a bare name of a class or function defined anywhere."""
    head, _, rest = token.partition(".")
    dotted = head.split("/") + (rest.split(".") if rest else [])
    for i in range(len(dotted), 0, -1):
        module = _module(dotted[:i])
        if module is not None:
            return _resolve_in(module, dotted[i:])
    if loose and "/" not in head:
        found = _definitions().get(dotted[0], [])
        if len(dotted) == 1:
            return bool(found)
        return any(_resolve_in(path, dotted) for path, top in found if top)
    return False


@cache
def defined_tests(path: Path) -> frozenset[str]:
    names = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
    return frozenset(names)


def locate_test_files(token: str) -> list[Path]:
    """A test file as the docs name it: `tests/unit/test_rules.py` or just `test_rules.py`."""
    if "/" in token:
        return [ROOT / token] if (ROOT / token).is_file() else []
    return sorted(p for p in (ROOT / "tests").rglob(token) if SKIP_DIRS.isdisjoint(p.parts))


def name_matches(pattern: str, names: frozenset[str]) -> bool:
    """A test name as the docs give it: whole, `prefix…`, `…part…` or `…suffix`; a `[param]`
    suffix (pytest's id) is ignored."""
    pattern = re.sub(r"\[.*\]$", "", pattern.replace("\\|", "|")).strip()
    starts, ends = pattern.startswith(ELLIPSIS), pattern.endswith(ELLIPSIS)
    core = pattern.strip(ELLIPSIS)
    if not core:
        return False
    if starts and ends:
        return any(core in n for n in names)
    if ends:
        return any(n.startswith(core) for n in names)
    if starts:
        return any(n.endswith(core) for n in names)
    return core in names


# -- what the docs point to ----------------------------------------------------------------------
CODE_TOKEN = re.compile(r"[A-Za-z_][\w/]*(?:\.[A-Za-z_]\w*)+")
FRAGMENT = re.compile(rf"{ELLIPSIS}?\w+{ELLIPSIS}(?:\[.*\])?|{ELLIPSIS}\w+(?:\[.*\])?")
PROSE_PATH = re.compile(rf"(?<![\w/.:$<@~-])((?:\.?[\w-]+/)+(?:[\w*-]+\.(?:{FILE_EXT}))?|[\w*-]+\.(?:{FILE_EXT}))"
                        r"(?![\w/<*$(-]|\.\w)")  # `spark.sql.catalog…` is a configuration key, not a file
NOT_PATHS = ("http://", "https://", "://")
# Run-time paths the docs describe (not in the repository): the local state and warehouse layout.
RUNTIME = re.compile(r"^(\.local/|\.venv/|keys\.json$|\$)")


def _segments(text: str):
    """(line number, piece) of a markdown text: a table row's cells one by one, other lines whole.
    A bare test name fragment belongs to the last test file named in the same piece."""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("|"):
            for cell in re.split(r"(?<!\\)\|", line):
                yield n, cell
        else:
            yield n, line


def named_tests(text: str) -> list[tuple[int, str, str]]:
    """(line, file, test name pattern) of every test a markdown text names."""
    out = []
    for n, piece in _segments(text):
        last_file = None
        for token in re.findall(r"`([^`]+)`", piece):
            token = token.strip()
            if "::" in token:
                last_file, name = token.split("::", 1)
                out.append((n, last_file, name))
            elif re.fullmatch(r"(?:[\w/]+/)?test_\w+\.py", token):
                last_file = token
            elif last_file and FRAGMENT.fullmatch(token):
                out.append((n, last_file, token))
    return out


def path_references(text: str) -> list[tuple[int, str]]:
    """(line, path) of every repository path a markdown text names, in prose, code and links."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for link in re.findall(r"\]\(([^)#\s]+)", line):
            if not link.startswith(NOT_PATHS):
                out.append((n, link))
        for match in PROSE_PATH.finditer(line):
            token = match.group(1)
            before = line[:match.start()]
            if re.search(r"\w+://\S*$", before) or RUNTIME.match(token):
                continue
            out.append((n, token))
    return out


def code_references(text: str, code_lines_only: bool) -> list[tuple[int, str]]:
    """(line, name) of the code names a markdown text gives in backticks: in docs/invariants.md
    the items of its `Code:` lists, in docs/algorithm.md the table's Code column."""
    out = []
    if code_lines_only:
        in_code = False
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip() == "Code:":
                in_code = True
            elif not line.startswith("- "):
                in_code = False
            elif in_code:
                out += [(n, t) for t in re.findall(r"`([^`]+)`", line)]
        return out
    for n, line in enumerate(text.splitlines(), 1):
        cells = re.split(r"(?<!\\)\|", line)
        if line.startswith("|") and len(cells) >= 5 and not set(cells[3].strip()) <= set("-"):
            out += [(n, t) for t in re.findall(r"`([^`]+)`", cells[3])]
    return out


def dangling_code(refs: list[tuple[int, str]], loose: bool) -> list[str]:
    bad = []
    for n, token in refs:
        if re.search(rf"\.(?:{FILE_EXT})$", token):
            ok = path_exists(token)
        elif CODE_TOKEN.fullmatch(token) or (loose and re.fullmatch(r"[A-Za-z_]\w*", token)):
            ok = code_exists(token, loose=loose)
        else:
            continue  # prose in backticks (`dblog status`)
        if not ok:
            bad.append(f"line {n}: {token}")
    return bad


def dangling_tests(text: str) -> list[str]:
    bad = []
    for n, file, name in named_tests(text):
        files = locate_test_files(file)
        if not files:
            bad.append(f"line {n}: {file} (no such test file)")
        elif not any(name_matches(name, defined_tests(f)) for f in files):
            bad.append(f"line {n}: {file}::{name}")
    return bad


# -- what the code's docstrings and comments cite ---------------------------------------------------
def code_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file, docstrings line by line."""
    source = path.read_text()
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    return sorted(out)


def dangling_citations(prose: list[tuple[int, str]]) -> list[str]:
    """Files and tests that comments and docstrings (line, text) cite and that do not exist."""
    bad = []
    for n, text in prose:
        bad += [f"line {n}: {p}" for _, p in path_references(text) if not path_exists(p)]
        for file, name in re.findall(rf"((?:[\w/]+/)?test_\w+\.py)::([\w{ELLIPSIS}]+)", text):
            files = locate_test_files(file)
            if files and not any(name_matches(name, defined_tests(f)) for f in files):
                bad.append(f"line {n}: {file}::{name}")
    return bad


def code_files() -> list[Path]:
    return sorted(p for base in CODE for p in _files(ROOT / base) if p.suffix == ".py")


# -- the checks ----------------------------------------------------------------------------------
def test_every_cited_invariant_is_listed_in_docs_invariants_md():
    listed = listed_invariants(INVARIANTS.read_text())
    missing = {n: where for n, where in citations().items() if n not in listed}
    assert not missing, f"invariants cited but not listed in docs/invariants.md: {missing}"


def test_the_invariants_are_numbered_one_to_n_and_each_names_its_code_and_tests():
    listed = listed_invariants(INVARIANTS.read_text())
    assert sorted(listed) == list(range(1, len(listed) + 1)) and listed
    for number, section in listed.items():
        assert "\nCode:\n- " in section, f"invariant {number} names no code"
        assert "\nTests that fail when it breaks:\n- " in section, f"invariant {number} names no test"
        assert "::" in section, f"invariant {number} names no test function"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_test_a_doc_names_exists(doc):
    assert dangling_tests(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_repository_path_a_doc_names_exists(doc):
    bad = [f"line {n}: {p}" for n, p in path_references(doc.read_text()) if not path_exists(p)
           and not (doc.parent / p).exists()]
    assert bad == []


@pytest.mark.parametrize("base", CODE)
def test_every_file_and_test_a_docstring_or_comment_of_the_code_cites_exists(base):
    bad = [f"{path.relative_to(ROOT)} {b}" for path in code_files() if path.is_relative_to(ROOT / base)
           for b in dangling_citations(code_prose(path))]
    assert bad == []


def test_every_code_name_in_docs_invariants_md_exists():
    refs = code_references(INVARIANTS.read_text(), code_lines_only=True)
    assert len(refs) > 20 and dangling_code(refs, loose=False) == []


def test_every_code_name_in_the_code_column_of_docs_algorithm_md_exists():
    refs = code_references((ROOT / "docs" / "algorithm.md").read_text(), code_lines_only=False)
    assert len(refs) > 20 and dangling_code(refs, loose=True) == []


# -- the checks catch what they are for ----------------------------------------------------------
def test_citations_are_read_in_every_form_the_docs_use():
    assert cited_numbers("holds invariant 2; see Invariant 6") == {2, 6}
    assert cited_numbers("follows from invariants 1-4 and 7") == {1, 2, 3, 4, 7}
    assert cited_numbers("invariants 3, 5 or 8") == {3, 5, 8}
    assert cited_numbers("the invariants below") == set()


def test_a_renamed_test_or_a_missing_test_file_is_caught():
    doc = ("| a | `tests/unit/test_rules.py::test_replaying_a_merge_changes_nothing`, `…no_such_part…` |\n"
           "`tests/unit/test_rules.py::test_paper_example_…` and `test_rules.py::test_no_such_test`\n"
           "`tests/unit/test_gone.py::test_x`\n")
    assert dangling_tests(doc) == ["line 1: tests/unit/test_rules.py::…no_such_part…",
                                   "line 2: test_rules.py::test_no_such_test",
                                   "line 3: tests/unit/test_gone.py (no such test file)"]


def test_a_missing_path_or_code_name_is_caught():
    assert [p for _, p in path_references("see `include/dblog/gone.py` and docs/algorithm.md")
            if not path_exists(p)] == ["include/dblog/gone.py"]
    assert path_references("--conf spark.sql.catalog.dblog.type=jdbc") == []
    assert dangling_code([(1, "model/rules.chunk_ready"), (2, "model/rules.chunk_gone"), (3, "merge/job.Nope"),
                          (4, "dblog_airflow/operators/wait.WaitForCaptureOperator")], loose=False) == \
        ["line 2: model/rules.chunk_gone", "line 3: merge/job.Nope"]


def test_a_dangling_citation_in_a_docstring_or_comment_is_caught(tmp_path):
    module = tmp_path / "cites.py"
    module.write_text('''"""Pinned by tests/unit/test_gone.py and by
tests/unit/test_rules.py::test_no_such_test; see docs/algorithm.md."""
X = 1  # measured in bench/results/gone.json (tests/unit/test_rules.py holds it)


def f():
    """Not a docstring of the module, still read: test_rules.py::test_paper_example_…"""
''')
    assert dangling_citations(code_prose(module)) == [
        "line 1: tests/unit/test_gone.py", "line 2: tests/unit/test_rules.py::test_no_such_test",
        "line 3: bench/results/gone.json"]
