"""Product code has no import circles: no module reaches itself again through what it imports.

The import graph of the product packages is built with grimp (import-linter's own graph) and its
strongly connected components are found (Tarjan); every component of more than one module is a
circle, listed with the imports that close it.

Rules:
- Product code: ``cloudloop``, ``workflows``, ``activities``, ``starters`` and ``workers`` (the
  dev stack, the tests and the benchmarks import it, never the other way round).
- ``if TYPE_CHECKING:`` imports count (grimp's default): a type-only import is still a dependency
  of the importer on the imported (it cannot be read or checked without it), and a circle of
  them is the two-phase wiring this test keeps out (an object finished after construction by one
  that imports it back). ``from __future__ import annotations`` makes such an import free at run
  time, not free of the coupling.
- An edge is an import statement as grimp resolves it (``from a.b import c`` imports the module
  ``a.b.c`` if there is one, else ``a.b``); the package a submodule's import runs implicitly is
  not an edge, so a package's ``__init__`` importing its own submodules is no circle, while a
  submodule importing its package's ``__init__`` back is one.
- A circle is broken structurally (the shared thing moves down into a module both import), never
  with an import moved into a function.
"""

from __future__ import annotations

import grimp

PRODUCT = ("cloudloop", "workflows", "activities", "starters", "workers")


def import_circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, in name order
    (Tarjan's algorithm, iterative: the graph is deeper than the recursion limit allows)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles: list[list[str]] = []
    #: The depth-first path: each module with the imports it has still to follow.
    work: list[tuple[str, list[str]]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        work.append((module, sorted(graph.find_modules_directly_imported_by(module))))

    for root in sorted(graph.modules):
        if root in index:
            continue
        visit(root)
        while work:
            module, pending = work[-1]
            if pending:
                imported = pending.pop(0)
                if imported not in index:
                    visit(imported)
                elif imported in on_stack:
                    low[module] = min(low[module], index[imported])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def describe(graph: grimp.ImportGraph, circle: list[str]) -> str:
    """The circle's modules and the imports among them, with their lines."""
    members = set(circle)
    lines = [f"circle of {len(circle)}: {', '.join(circle)}"]
    for importer in circle:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            details = graph.get_import_details(importer=importer, imported=imported)
            where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
            lines.append(f"    {importer} -> {imported} ({where})")
    return "\n".join(lines)


def test_import_circles_finds_a_circle() -> None:
    """The finder itself: a two-module circle and a three-module one, a self-free tail."""
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("p.a", "p.b"),
        ("p.b", "p.a"),
        ("p.c", "p.d"),
        ("p.d", "p.e"),
        ("p.e", "p.c"),
        ("p.e", "p.f"),
    ]:
        graph.add_import(importer=importer, imported=imported)
    assert import_circles(graph) == [["p.a", "p.b"], ["p.c", "p.d", "p.e"]]


def test_product_code_has_no_import_circles() -> None:
    graph = grimp.build_graph(*PRODUCT, include_external_packages=False, cache_dir=None)
    circles = import_circles(graph)
    assert not circles, "import circles in product code:\n" + "\n".join(
        describe(graph, circle) for circle in circles
    )
