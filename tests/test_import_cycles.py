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


# The layers, low to high: a module imports only from its own layer or lower ones (any import statement, at any
# depth). A module's layer is that of the longest prefix of its name listed here; every module needs one.
LAYERS = [
    # utilities: the errors, and how the hot loops run (compiled, side by side, the collector held off). The
    # package's __init__ imports nothing (it exports the API by name); msopt.compiled.jit imports the prebuilt
    # extension msopt._loops from it. msopt.prebuild is the thin `python -m msopt.prebuild` entry.
    # msopt.files.reading too: every file msopt reads, the model files the loader reads included, goes through its
    # bounds, and it needs nothing but the errors.
    ("msopt", "msopt.errors", "msopt.compiled", "msopt.prebuild", "msopt.files.reading"),
    # the graph: the loaded model and its views, runs and orders
    ("msopt.graph", "msopt.load"),
    # files in and out, models included: emit writes a model from a view and a partition, importing no plan
    ("msopt.files", "msopt.emit"),
    ("msopt.simulator",),
    # planning: the rules sit in its layer (auto searches over them, the plan layer runs them)
    ("msopt.planning", "msopt.rules"),
    # what uses plans: drawing them, running models, lanes, tuning (these call each other, lazily)
    ("msopt.visualize", "msopt.runner", "msopt.lanes", "msopt.tune"),
    ("msopt.api", "msopt.stream"),
    ("msopt.commands",),
    ("msopt.cli", "msopt.__main__"),
]

# Imports from a lower layer into a higher one that are allowed, each with its reason: none today. An entry is
# (importing module, imported module): say why it cannot be moved down instead.
UPWARD_ALLOWED: dict = {}


def layer_of(name):
    matches = [
        (len(prefix), rank)
        for rank, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if name == prefix or name.startswith(prefix + ".")
    ]
    return max(matches)[1] if matches else None


def test_every_module_has_a_layer():
    assert [name for name in import_graph() if layer_of(name) is None] == []
    assert layer_of("msopt.simulator.list_schedule") == 3 and layer_of("msopt.rules.chains") == 4
    assert layer_of("msopt") == 0 and layer_of("msopt.cli") == len(LAYERS) - 1


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    graph = import_graph()
    upward = sorted(
        (name, imported)
        for name, imports_ in graph.items()
        for imported in imports_
        if layer_of(imported) > layer_of(name) and (name, imported) not in UPWARD_ALLOWED
    )
    assert upward == []
    assert set(UPWARD_ALLOWED) <= {(a, b) for a in graph for b in graph[a]}, "an allowed import that is gone"
