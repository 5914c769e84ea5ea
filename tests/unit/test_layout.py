"""The core's layout shows its design: few modules directly in the package, the rest in
subpackages by idea; no import cycle between modules; the ledger and the cycle import
neither a policy, the simulator nor the command line.

Imports are read from the source, not executed: every import outside ``if TYPE_CHECKING:``
counts, a late one inside a function too (it is a dependency all the same); for what the
ledger and the cycle import, only the module-level ones count (a late import is how a lower
layer reaches an optional part on purpose).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "common" / "coshare"
#: The most modules directly in the core package (``__init__`` included).
MOST_TOP_MODULES = 12
#: Subpackages that hold the ledger and the cycle: below the policies and the command line.
LOWER = ("coshare.ledger", "coshare.cycle", "coshare.model", "coshare.ports", "coshare.schema")
#: What they may not import.
HIGHER = ("coshare.policies", "coshare.sim", "coshare.cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Try):
            yield from node.body
            for handler in node.handlers:
                yield from handler.body
            continue
        yield node


def _everywhere(tree: ast.Module) -> Iterator[ast.AST]:
    typing_only: set[int] = set()  # lines only a type checker reads
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) not in typing_only:
            yield node


def imports(name: str, path: Path, known: dict[str, Path], *, late: bool = False) -> set[str]:
    """The coshare modules ``name`` imports at module level (``late``: anywhere)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for node in _everywhere(tree) if late else _top_level(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    found.add(full)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def graph(*, late: bool = False) -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known, late=late) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_few_modules_sit_directly_in_the_core() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MOST_TOP_MODULES, top


def test_no_two_modules_import_each_other_even_through_others() -> None:
    assert cycles(graph(late=True)) == []


def test_late_imports_are_read_too() -> None:
    """``coshare demo`` loads the simulator inside the command: a dependency all the same."""
    known = modules()
    main = known["coshare.cli.main"]
    assert "coshare.sim.runners" not in imports("coshare.cli.main", main, known)
    assert "coshare.sim.runners" in imports("coshare.cli.main", main, known, late=True)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_ledger_and_the_cycle_import_no_policy_simulator_or_command_line() -> None:
    edges = graph()
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in edges.items()
        if name.startswith(LOWER)
        for target in targets
        if target.startswith(HIGHER)
    )
    assert wrong == []
