"""The package's shape, as docs/layout.md states it: every module named in the map and nothing else,
imports that follow the layer order, no import cycle, no private name used across modules, and modules,
functions and folders of a size a reader can hold."""
import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "yolo_data"
MAP = ROOT / "docs" / "layout.md"
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_FOLDER_MODULES = 450, 80, 14


def modules(package: Path = PACKAGE) -> dict:
    """Dotted name -> file, for every module of the package (a folder's __init__ under the folder's name)."""
    out = {}
    for p in sorted(package.rglob("*.py")):
        parts = list(p.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def read_map(text: str):
    """(layers bottom first, {section: [module, ...]}) from the map's text: the line of layers joined by
    arrows, and one table per section (``## `folder/` `` or ``## On top``)."""
    layers = next([name.strip("`/ ") for name in line.split("→")] for line in text.splitlines() if "→" in line)
    tables, section = defaultdict(list), None
    for line in text.splitlines():
        heading = re.match(r"^## (?:`(\w+)/`|On top)", line)
        if line.startswith("## "):
            section = (heading.group(1) or "") if heading else None
        row = re.match(r"^\| `(\w+)` \|", line)
        if row and section is not None:
            tables[section].append(row.group(1))
    return layers, dict(tables)


def imports(name: str, path: Path, known: dict):
    """(target module, imported name or None, line) for every import of the package in one module,
    function-level imports included.  ``from pkg import mod`` targets the module ``pkg.mod``."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in known:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield (full, None, node.lineno) if full in known else (target, alias.name, node.lineno)


def layer_of(name: str) -> str:
    """The layer a module belongs to: its folder, or its own name on top; the package itself is above all."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def graph(known: dict):
    edges = defaultdict(set)
    for name, path in known.items():
        for target, _, _ in imports(name, path, known):
            if target != name:
                edges[name].add(target)
    return edges


def cycles(edges: dict) -> list:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layering_violations(known: dict, layers: list) -> list:
    rank = {layer: i for i, layer in enumerate(layers)}
    out = []
    for name, path in known.items():
        here = layer_of(name)
        for target, _, line in imports(name, path, known):
            there = layer_of(target)
            if here == "" or there == here:
                continue
            if there == "" or rank[there] > rank[here]:
                out.append(f"{path.relative_to(ROOT)}:{line} ({here or 'yolo_data'}) imports {target} "
                           f"({there or 'the package'}), a layer above it")
    return out


def private_names(known: dict) -> list:
    """Private names taken from another module: ``from .x import _y``, and ``x._y`` where x is a module of
    the package imported by name."""
    out = []
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        bound = {}
        for target, imported, line in imports(name, path, known):
            if imported and imported.startswith("_") and not imported.startswith("__") and target != name:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {imported} from {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    bound[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
        # local names bound to a module of the package (``from . import remote``, ``import yolo_data.x``)
        module_names = {local for local, full in bound.items()
                        if any(t == full or t.endswith("." + full) for t in known)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and node.value.id in module_names):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}")
    return out


def sizes(known: dict) -> list:
    out = []
    for name, path in known.items():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines "
                               f"(at most {MAX_FUNCTION_LINES})")
    folders = defaultdict(int)
    for name, path in known.items():
        if path.name != "__init__.py":
            folders[path.parent] += 1
    out += [f"{folder.relative_to(ROOT)}: {n} modules (at most {MAX_FOLDER_MODULES})"
            for folder, n in folders.items() if n > MAX_FOLDER_MODULES and folder != PACKAGE]
    return out


def test_the_map_names_every_module_and_every_folder_in_the_layer_order():
    layers, tables = read_map(MAP.read_text())
    known = modules()
    on_disk = defaultdict(set)
    for name, path in known.items():
        parts = name.split(".")
        if len(parts) == 2 and path.name != "__init__.py":
            on_disk[""].add(parts[1])
        elif len(parts) == 3:
            on_disk[parts[1]].add(parts[2])
        elif len(parts) == 2:
            on_disk.setdefault(parts[1], set())
    assert {k: set(v) for k, v in tables.items()} == dict(on_disk)
    folders = {k for k in on_disk if k}
    assert set(layers) == folders | on_disk[""], "the line of layers names every folder and top module once"
    assert len(layers) == len(set(layers))


def test_imports_follow_the_layers_without_cycles_or_private_names():
    layers, _ = read_map(MAP.read_text())
    known = modules()
    problems = layering_violations(known, layers)
    problems += [" <-> ".join(group) for group in cycles(graph(known))]
    problems += private_names(known)
    assert not problems, "\n".join(problems)


def test_modules_functions_and_folders_stay_small():
    problems = sizes(modules())
    assert not problems, "\n".join(problems)


@pytest.fixture
def fake_package(tmp_path):
    """A package of four modules with one of each fault the checks exist for."""
    pkg = tmp_path / "yolo_data"
    for folder in ("low", "high"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from ..high import b\n")           # a layer above
    (pkg / "high" / "b.py").write_text("from ..low.a import _secret\n")   # private, and a cycle with a
    (pkg / "high" / "c.py").write_text("from ..low import a\nx = a._hidden\n" + "y = 1\n" * 460)
    return pkg


def test_the_checks_find_each_fault_they_exist_for(fake_package):
    global ROOT
    known = modules(fake_package)
    saved, ROOT = ROOT, fake_package.parent
    try:
        assert layering_violations(known, ["low", "high"]) == [
            "yolo_data/low/a.py:1 (low) imports yolo_data.high.b (high), a layer above it"]
        assert cycles(graph(known)) == [["yolo_data.high.b", "yolo_data.low.a"]]
        assert private_names(known) == ["yolo_data/high/b.py:1 imports _secret from yolo_data.low.a",
                                        "yolo_data/high/c.py:2 uses a._hidden"]
        assert sizes(known) == ["yolo_data/high/c.py: 462 lines (at most 450)"]
    finally:
        ROOT = saved
