"""The house's shape (docs/architecture.md): no import circle among the project's modules, counting
imports inside functions, and no module of runner/ over MAX_LINES lines. Read from the source
with `ast`, so nothing is imported and a circle that Python would forgive (a lazy import inside
a function) is still found."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runner", "hydra_plugins")
MAX_LINES = 600  # a module with one job is a few hundred lines


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of runner/ and hydra_plugins/ by its dotted name (a package by its folder's)."""
    modules = {}
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _named(module: str, path: Path, node: ast.AST) -> list[str]:
    """The dotted names an import statement may refer to: a module, or a name inside one."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: from the module's own package, up `level - 1` packages
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {project module it imports: the line of the first such import}, every import
    statement counted wherever it stands (module level, a function, `if TYPE_CHECKING:`). A name
    imported from a module counts as that module, or as the submodule it names."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _named(module, path, node):
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                # A package's own modules importing it (its __init__) are not a circle.
                if name and name != module and not module.startswith(name + "."):
                    edges.setdefault(name, node.lineno)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, {})))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def shortest_loop(circle: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """The fewest imports that lead from the circle's first module back to it (breadth first)."""
    members, first = set(circle), circle[0]
    came_from: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target not in members or target in came_from:
                    continue
                came_from[target] = module
                if target == first:
                    loop = [first]
                    while loop[-1] != first or len(loop) == 1:
                        loop.append(came_from[loop[-1]])
                    return loop[::-1]
                following.append(target)
        frontier = following
    return circle


def describe(circle: list[str], graph: dict[str, dict[str, int]],
             modules: dict[str, Path]) -> str:
    """A circle: its modules, then one loop through it as the imports that make it."""
    loop = shortest_loop(circle, graph)
    lines = [f"import circle of {len(circle)}: {', '.join(circle)}", "  for one:"]
    for module, target in zip(loop, loop[1:]):
        lines.append(f"  {modules[module].relative_to(ROOT)}:{graph[module][target]} imports "
                     f"{target}")
    return "\n".join(lines)


def test_no_import_circle():
    """Imports go one way, from the entry points down (docs/architecture.md): a module that
    imports, even inside a function, one that imports it back is a circle."""
    modules = project_modules()
    graph = import_graph(modules)
    found = circles(graph)
    assert not found, "\n".join(describe(circle, graph, modules) for circle in found)


def test_the_circle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    """The check itself: a lazy import that closes a circle, and a relative one, are found."""
    (tmp_path / "runner" / "low").mkdir(parents=True)
    (tmp_path / "hydra_plugins").mkdir()
    (tmp_path / "runner" / "__init__.py").write_text("")
    (tmp_path / "runner" / "low" / "__init__.py").write_text("")
    (tmp_path / "runner" / "top.py").write_text("from runner.low import base\n")
    (tmp_path / "runner" / "low" / "base.py").write_text(
        "def later():\n    from . import helper\n")
    (tmp_path / "runner" / "low" / "helper.py").write_text(
        "def later():\n    import runner.top\n")
    modules = project_modules(tmp_path)
    assert circles(import_graph(modules)) == [
        ["runner.low.base", "runner.low.helper", "runner.top"]]
    (tmp_path / "runner" / "low" / "helper.py").write_text("import runner.low\n")
    assert circles(import_graph(project_modules(tmp_path))) == []


def test_no_module_of_runner_is_over_max_lines():
    """A module with one job stays a few hundred lines; past MAX_LINES it has a second job."""
    over = {path.relative_to(ROOT): lines for module, path in project_modules().items()
            if module.startswith("runner")
            and (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert not over, "over %d lines: %s" % (MAX_LINES, ", ".join(
        f"{path} ({lines})" for path, lines in sorted(over.items())))


# The floors of docs/architecture.md, highest first: a module imports from its own floor or
# below. The most specific prefix decides; a module directly in runner/ not named here is an
# entry point (app, cli, ui, report, …).
FLOORS = {
    "hydra_plugins": 6, "runner.inspect.command": 6, "runner.inspect.__main__": 6,
    "runner.sweep": 5, "runner.terminal.summary": 5,
    "runner.job": 4,
    "runner.run": 3, "runner.inspect": 3,
    "runner.record": 2, "runner.results": 2,
    "runner.config": 1, "runner.backends": 1, "runner.terminal": 1,
    "runner.errors": 0, "runner.user_cache": 0, "runner": 0,
}
MAX_UPWARD = 4  # a fifth import against the direction means a module is on the wrong floor


def floor(module: str) -> int:
    parts = module.split(".")
    if parts[0] == "runner" and len(parts) == 2 and module not in FLOORS:
        return 6  # an entry point
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in FLOORS:
            return FLOORS[".".join(parts[:end])]
    raise AssertionError(f"{module} is on no floor: add it to FLOORS")


def upward_imports(modules: dict[str, Path], graph) -> list[tuple[str, str, int]]:
    return [(module, target, line) for module, edges in graph.items()
            for target, line in edges.items() if floor(target) > floor(module)]


def test_imports_go_down_the_floors_but_a_few_each_with_its_reason_beside_it():
    modules = project_modules()
    upward = upward_imports(modules, import_graph(modules))
    assert len(upward) <= MAX_UPWARD, upward
    for module, target, line in upward:
        source = modules[module].read_text().splitlines()
        beside = " ".join(source[max(0, line - 2):line])  # the import's line and the one above
        assert "why" in beside, f"{module} imports {target} (line {line}) against the floors " \
                                f"without a `# why` comment beside it"


def test_an_import_up_the_floors_is_found():
    graph = {"runner.record.tracking": {"runner.sweep.callback": 3}, "runner.sweep.callback": {}}
    assert upward_imports({}, graph) == [("runner.record.tracking", "runner.sweep.callback", 3)]
