"""The service's layering, read from its source: only ``service/store/`` imports SQLAlchemy or a
database driver, and no module of ``service/`` reaches itself through its imports (an import
inside a function counts: hiding a circle there does not break it)."""

from __future__ import annotations

from pathlib import Path

import evalstop
from import_graph import cycles, graph, imports, module_name

SRC = Path(evalstop.__file__).parent
SERVICE = SRC / "service"
STORE = SERVICE / "store"
DATABASE_MODULES = {"sqlalchemy", "alembic", "psycopg", "psycopg2", "psycopg_pool", "sqlite3", "asyncpg"}


def _imports(path: Path, package: str = "") -> list[tuple[int, str, list[str]]]:
    """Every import of the file, at any depth (tests/import_graph.py): (line, absolute module,
    names imported from it)."""
    if not package:
        name = module_name(path, SRC)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports(path, package)


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
    """The import graph of ``service/`` alone (tests/import_graph.py)."""
    inside = "evalstop.service"
    edges = graph(SRC)
    return {name: {t for t in targets if t == inside or t.startswith(inside + ".")}
            for name, targets in edges.items() if name == inside or name.startswith(inside + ".")}


def test_no_import_circle_in_the_service() -> None:
    found = cycles(_graph())
    assert not found, "import circle: " + "; ".join(" -> ".join(c) for c in found)


def test_the_circle_check_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
