"""No import cycle in msopt/: every import statement, at any depth (inside functions too), parsed with ast."""

import ast
from pathlib import Path

from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "msopt"


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path, name, modules):
    """The msopt modules ``path`` imports: `import a.b`, `from a import b` (b a module or a name), relative ones."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph():
    paths = {module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}
    return {name: imports(path, name, paths) for name, path in paths.items()}


def cycles(graph):
    """The strongly connected components of more than one module (each is at least one cycle)."""
    names = sorted(graph)
    index = {n: i for i, n in enumerate(names)}
    rows, cols = zip(*[(index[a], index[b]) for a in names for b in graph[a]]) if any(graph.values()) else ((), ())
    matrix = csr_matrix(([1] * len(rows), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(matrix, directed=True, connection="strong")
    groups = {}
    for name, label in zip(names, labels):
        groups.setdefault(label, []).append(name)
    return sorted(g for g in groups.values() if len(g) > 1)


def test_the_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    a, b, c = (tmp_path / f"{n}.py" for n in "abc")
    a.write_text("import pkg.b\n")
    b.write_text("def f():\n    from pkg.c import g\n")
    c.write_text("def g():\n    if True:\n        from pkg import a\n")
    modules = {"pkg.a", "pkg.b", "pkg.c"}
    graph = {f"pkg.{p.stem}": imports(p, f"pkg.{p.stem}", modules) for p in (a, b, c)}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert cycles({"pkg.a": {"pkg.b"}, "pkg.b": set()}) == []


def test_no_import_cycle_in_msopt():
    graph = import_graph()
    assert (
        "msopt.planning.plan" in graph and "msopt.rules.auto" in graph["msopt.planning.plan"]
    )  # the walk sees lazy imports
    assert cycles(graph) == []


def test_rules_import_neither_constraints_simulate_nor_cost():
    graph = import_graph()
    rules = [
        name
        for name in graph
        if name.startswith("msopt.rules.") and name not in ("msopt.rules.auto", "msopt.rules.walk")
    ]
    assert rules
    for name in rules:
        assert not graph[name] & {
            "msopt.planning.constraints",
            "msopt.planning.links",
            "msopt.simulator.simulate",
            "msopt.simulator.cost",
        }, name


def test_the_auto_search_does_not_call_back_into_the_policy_registry():
    tree = ast.parse((ROOT / PACKAGE / "rules" / "auto.py").read_text())
    imported = {
        (node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    imported |= {(alias.name, None) for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert (
        not {
            ("msopt.rules", "run_rule"),
            ("msopt.rules", "POLICIES"),
            ("importlib", "import_module"),
            ("importlib", None),
        }
        & imported
    )
