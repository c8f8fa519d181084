"""The package's layout: imports follow the data flow, never go up it, never form a cycle, never use __init__."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nb_cudaguard"

# Each part may import only parts of a lower rank (or itself). The flow: a cell is recorded, a failure becomes an
# incident, the incident is diagnosed; the checks stand beside the diagnosis; a restart plans the replay, carries
# values and execs; the panel renders the report and offers the restart; the command line and the demo drive a
# kernel from outside; the shell-facing wiring sits on top.
RANK = {
    "errors": 0,
    "families": 0,
    "record": 1,
    "incident": 2,
    "testing": 3,
    "diagnosis": 3,
    "check": 4,
    "replay": 5,
    "carry": 6,
    "snapshot": 6,
    "relaunch": 7,
    "panel": 8,
    "cli": 9,
    "extension": 10,
    "magics": 10,
    "__main__": 11,
    "__init__": 11,
}
LONGEST_MODULE = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every nb_cudaguard module this file imports, at any depth (a lazy import is still a dependency)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("nb_cudaguard")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("nb_cudaguard"):
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                is_module = (PACKAGE.parent / submodule.replace(".", "/")).with_suffix(".py").exists() or (
                    PACKAGE.parent / submodule.replace(".", "/") / "__init__.py"
                ).exists()
                found.append((node.lineno, submodule if is_module else target))
    return found


def _graph() -> dict[str, list[tuple[int, str]]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_every_part_has_a_rank() -> None:
    parts = {_part(m) for m in _graph()}
    assert parts <= set(RANK), sorted(parts - set(RANK))


def test_no_import_points_up_the_flow_or_goes_through_the_package_init() -> None:
    wrong = []
    for module, imports in _graph().items():
        for line, target in imports:
            if target == "nb_cudaguard" and module != "nb_cudaguard":
                wrong.append(f"{module}:{line} imports the package's __init__")
            elif RANK[_part(target)] > RANK[_part(module)]:
                wrong.append(f"{module}:{line} -> {target} (up the flow)")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle() -> None:
    graph = {m: {t for _, t in imports if t != m} for m, imports in _graph().items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > LONGEST_MODULE
    }
    assert not long, long
