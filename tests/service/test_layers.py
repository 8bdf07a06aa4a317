"""The service's layering, read from its source: only ``service/store/`` imports SQLAlchemy or a
database driver, and no module of ``service/`` reaches itself through its imports (an import
inside a function counts: hiding a circle there does not break it)."""

from __future__ import annotations

import ast
from pathlib import Path

import evalstop

SRC = Path(evalstop.__file__).parent
SERVICE = SRC / "service"
STORE = SERVICE / "store"
DATABASE_MODULES = {"sqlalchemy", "alembic", "psycopg", "psycopg2", "psycopg_pool", "sqlite3", "asyncpg"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str = "") -> list[tuple[int, str, list[str]]]:
    """Every import of the file, at any depth: (line, absolute module, names imported from it)."""
    if not package:
        package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module, [a.name for a in node.names]))
    return found


def _service_files() -> list[Path]:
    return sorted(SERVICE.rglob("*.py"))


def test_only_the_store_imports_a_database_library() -> None:
    offenders = [f"{path.relative_to(SRC)}:{line} imports {module}"
                 for path in sorted(SRC.rglob("*.py")) if STORE not in path.parents
                 for line, module, _ in _imports(path) if module.partition(".")[0] in DATABASE_MODULES]
    assert not offenders, "SQLAlchemy or a driver imported outside service/store/:\n" + "\n".join(offenders)


def test_the_boundary_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    # the check above would pass vacuously if _imports missed nested or relative imports
    assert any(m == "evalstop.service.store" for _, m, _ in _imports(SERVICE / "domain.py"))
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import sqlalchemy.orm\n    from psycopg import sql\n")
    assert {"sqlalchemy.orm", "psycopg"} <= {m for _, m, _ in _imports(probe, "evalstop.service")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in _service_files()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, module, names in _imports(path):
            submodules = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            # "from P import m" runs P's __init__, then m (P itself counts unless importer is in P)
            inside = name.startswith(module + ".")
            targets = submodules + ([] if submodules and inside else [module])
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_circle_in_the_service() -> None:
    found = _cycle(_graph())
    assert found is None, "import circle: " + " -> ".join(found or [])


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
