"""The package's imports flow one way: no circle, no module importing a layer above its own,
no generic module importing one target or branching on a target's name.

Imports are read from the source (``ast``), function-level ones included: an import inside a
function is an arrow too, one a reader does not see at the top. Imports under
``if TYPE_CHECKING:`` are annotations only and do not count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import cognate

PACKAGE = Path(cognate.__file__).parent

# Bottom to top: a module may import its own layer and the ones below. "registry" is the
# targets package itself (cognate.targets: Target, register_target, get_target); "targets" the
# targets' own subpackages, which the registry reaches by name only (importlib).
LAYERS: list[set[str]] = [
    {"errors", "util", "paths", "stats", "config", "build", "lifetime", "homefiles"},
    {"matrix", "budget", "formats", "matrix_stats", "space", "runner", "synth", "suitesparse"},
    {"registry"},
    {"hostid", "store", "timing", "dataset", "records", "progress"},
    {"targets"},
    {"model"},
    {"transfer"},
    {"search", "collect"},
    {"evaluate"},
    {"api", "torch", "pyg", "cli", "__main__", "__init__"},
    {"bench"},  # what the benchmark scripts share: above everything a user calls
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
# Front ends of one target, which import it by design: cognate.torch and cognate.pyg run the
# cpu kernels; `data import-waco` reads WACO's cpu schedules; the benchmarks time cpu kernels.
TARGET_FRONT_ENDS = ("cognate.torch", "cognate.pyg", "cognate.cli.data_waco", "cognate.bench")
TARGET_NAMES = {"cpu", "spade", "gpu", "spade-inverted", "spade-calibrated"}


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", "")) == (
            "TYPE_CHECKING"
        ):
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    return (n for n in ast.walk(tree) if id(n) not in typing_only)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The cognate modules ``name`` imports (a package's submodule when it names one), by
    import statement or by name through importlib (a string naming a cognate module in a
    module that calls ``import_module``: a plugin list is an import all the same)."""
    found = set()
    source = path.read_text()
    by_name = "import_module" in source
    for node in _runtime_nodes(ast.parse(source)):
        if (
            by_name
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value in known)
        ):
            targets = [node.value]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            # ``from pkg import sub`` imports pkg.sub; ``from mod import thing``, mod
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            # the root package is the facade (cognate.tune, __version__): not an arrow
            if target.startswith("cognate.") and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = dict(_modules())
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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


def _room(module: str) -> str:
    if module == "cognate.targets":
        return "registry"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_an_import_by_name_is_an_arrow(tmp_path: Path) -> None:
    """A plugin list handed to importlib is read as imports (a hidden upward one fails)."""
    module = tmp_path / "learned.py"
    module.write_text(
        "import importlib\nPLUGINS = ('cognate.transfer.finetune',)\n"
        "def load():\n    for name in PLUGINS:\n        importlib.import_module(name)\n"
    )
    known = {"cognate.model.learned", "cognate.transfer.finetune"}
    assert _imports("cognate.model.learned", module, known) == {"cognate.transfer.finetune"}


def test_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{name} -> {target}"
        for name, targets in _graph().items()
        for target in targets
        if LAYER[_room(target)] > LAYER[_room(name)]
    ]
    assert upward == []


def test_every_room_has_a_layer() -> None:
    assert {_room(name) for name in _graph()} <= set(LAYER)


def test_generic_modules_import_no_target() -> None:
    """Outside cognate.targets a target is reached through the registry (get_target)."""
    wrong = [
        f"{name} -> {target}"
        for name, targets in _graph().items()
        if not name.startswith(("cognate.targets", *TARGET_FRONT_ENDS))
        for target in targets
        if target.startswith("cognate.targets.")
    ]
    assert wrong == []


def test_generic_modules_do_not_branch_on_a_target_name() -> None:
    """``target == "spade"`` outside cognate.targets: a property of the Target belongs there."""
    wrong = []
    for name, path in _modules():
        if name.startswith(("cognate.targets", *TARGET_FRONT_ENDS)):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = {s.value for s in sides if isinstance(s, ast.Constant)}
            about_target = any(
                "target" in (getattr(s, "id", "") or getattr(s, "attr", "")) for s in sides
            )
            if about_target and names & TARGET_NAMES:
                wrong.append(f"{name}:{node.lineno}")
    assert wrong == []


SCRIPTS = PACKAGE.parent / "scripts"


def test_no_script_loads_another_script() -> None:
    """What scripts share lives in cognate.bench; a script importing a sibling by path (or by
    name) hides a dependency no packaging or layout test sees."""
    siblings = {p.stem for p in SCRIPTS.glob("*.py")}
    wrong = []
    for path in sorted(SCRIPTS.glob("*.py")):
        source = path.read_text()
        if "spec_from_file_location" in source or "SourceFileLoader" in source:
            wrong.append(f"{path.name}: loads a file as a module")
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            wrong += [f"{path.name} imports {n}" for n in names if n.split(".")[0] in siblings]
    assert wrong == []


def test_architecture_names_the_same_layers() -> None:
    """docs/architecture.md's layer list is LAYERS, in order."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    block = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    documented = []
    for line in filter(str.strip, block.splitlines()):
        names = re.sub(r"\([^)]*\)", "", line.split(".", 1)[1]).replace("\\_", "_")
        documented.append({n.strip() for n in names.split(",")})
    assert documented == LAYERS


def test_architecture_tree_names_every_cpu_module() -> None:
    """Every module and folder of cognate/targets/cpu appears in docs/architecture.md's tree."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    tree = text.split("### The cpu target's code")[1].split("###")[0]
    cpu = PACKAGE / "targets" / "cpu"
    names = [p.name for p in cpu.iterdir() if p.suffix == ".py" and p.name != "__init__.py"]
    names += [f"{p.name}/" for p in cpu.iterdir() if p.is_dir() and p.name != "__pycache__"]
    names += [p.name for p in (cpu / "families").glob("*.py") if p.name != "__init__.py"]
    names += [p.name for p in (cpu / "measure").glob("*.py") if p.name != "__init__.py"]
    assert [n for n in names if n not in tree] == []
