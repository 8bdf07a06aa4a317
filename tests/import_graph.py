"""The import graph of a package, read from its source with ``ast``: every ``import`` and
``from ... import`` at any depth (module level, inside a function, under ``if TYPE_CHECKING``)
is an edge, because an import moved into a function to dodge a circle is still a circle.

``from P import m`` where ``m`` is a submodule is an edge to ``P.m``, and to ``P`` itself (its
``__init__`` runs first) unless the importer lives inside ``P``.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """The dotted name of ``path``, a file under the package directory ``root``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: str) -> list[tuple[int, str, list[str]]]:
    """Every import of the file, at any depth: (line, absolute module, names imported from it).
    ``package`` is the package the file's relative imports start from."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module, [a.name for a in node.names]))
    return found


def graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports (edges inside ``root`` only)."""
    modules = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for _, module, names in imports(path, package):
            submodules = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            inside = name.startswith(module + ".")
            targets = submodules + ([] if submodules and inside else [module])
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (or a module that
    imports itself), each as a path that ends where it starts; sorted, so a message is stable."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                components.append(component)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(_circle(edges, component) for component in components)


def _circle(edges: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest circle through the component's first module, by breadth-first search."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle in the component {sorted(component)}")
