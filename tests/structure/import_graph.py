"""The import graph of src/iolab, read from the source with the standard library's ast.

Every `import iolab...` / `from iolab... import ...` is an edge, also inside a function: a
late import that exists to hide a cycle is still an edge here, so the cycle is still found.
`if TYPE_CHECKING:` imports are left out (they never run). Run it as a script to print the
graph's strongly connected components and each module's size.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "iolab"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for f in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[tuple[ast.stmt, bool]]:
    """(import statement, at module level?) for every import that can run."""
    def walk(node: ast.AST, top: bool) -> Iterator[tuple[ast.stmt, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                yield from (x for n in child.orelse for x in walk(n, top))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, top
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            yield from walk(child, inner)
    yield from walk(tree, True)


def edges(mods: dict[str, Path] | None = None) -> dict[str, dict[str, bool]]:
    """module -> {imported module: at module level?} (iolab modules only)."""
    mods = mods or modules()
    graph: dict[str, dict[str, bool]] = {m: {} for m in mods}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for stmt, top in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            else:
                base = stmt.module or ""
                if stmt.level:
                    anchor = pkg.split(".")[: len(pkg.split(".")) - stmt.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in stmt.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != name and t.startswith(PACKAGE):
                    graph[name][t] = graph[name].get(t, False) or top
    return graph


def cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


if __name__ == "__main__":
    g = edges()
    for comp in cycles(g):
        print("cycle:", " <-> ".join(comp))
        for a in comp:
            print("   ", a, "->", sorted(b for b in g[a] if b in comp))
