"""No import circle anywhere in ``src/evalstop``: the graph counts every import, including those
inside functions and under ``if TYPE_CHECKING`` (tests/import_graph.py)."""

from __future__ import annotations

from pathlib import Path

import evalstop
from import_graph import cycles, graph, imports

SRC = Path(evalstop.__file__).parent

#: Circles that are known and left for a later change, each with the reason. Empty: a new
#: circle fails the test below.
KNOWN: list[list[str]] = []


def test_no_import_circle_in_the_package() -> None:
    found = [c for c in cycles(graph(SRC)) if c not in KNOWN]
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_known_circle_still_exists() -> None:
    # a circle that was fixed comes off the list, so the list never hides a new one
    gone = [c for c in KNOWN if c not in cycles(graph(SRC))]
    assert not gone, f"no longer circles, remove them from KNOWN: {gone}"


def test_the_graph_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import B\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n    return b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\nB = 1\n")
    (pkg / "c.py").write_text("import pkg.sub.b\nfrom . import a\n")
    edges = graph(pkg)
    assert edges["pkg.a"] == {"pkg.sub.b", "pkg.sub"}
    assert edges["pkg.sub.b"] == {"pkg.a"}
    assert edges["pkg.sub"] == {"pkg.sub.b"}  # inside pkg.sub: "from .b import B" is pkg.sub.b only
    assert edges["pkg.c"] == {"pkg.sub.b", "pkg.a"}  # "from . import a" inside pkg: pkg.a, not pkg
    assert cycles(edges) == [["pkg.a", "pkg.sub.b", "pkg.a"]]  # the shortest circle of the component
    assert imports(pkg / "a.py", "pkg") == [(2, "pkg.sub", ["b"])]


def test_cycles_lists_one_circle_per_component() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "f"}, "f": set(), "g": {"g"}}
    assert cycles(edges) == [["a", "b", "c", "a"], ["d", "e", "d"], ["g", "g"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
