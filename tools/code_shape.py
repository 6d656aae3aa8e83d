"""The package's shape in numbers: parameters and lines of the entry points and the dataset class, and
the import graph between the package's modules (its depth, whether any import runs back up, and how many
modules each folder holds).

    python tools/code_shape.py [package folder]

Lines are counted from the ``def``/``class`` line to the last line of the body, docstring included.
An arrow A -> B means module A imports B at module level or inside a function; the depth is the
longest chain of such arrows; a cycle is reported as an arrow that runs back up.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

# where each entry point lives now, and where it lived before (a file that is absent is skipped)
ENTRY_POINTS = [
    ("dataset.py", "YoloDataset"), ("dataset.py", "YoloDataset.__init__"),
    ("dataset.py", "LoadImagesAndLabels.__init__"), ("integrations/yolov5.py", "create_dataloader"),
    ("yolov5.py", "create_dataloader"), ("loader.py", "create_dataloader"),
    ("integrations/ultralytics_loader.py", "create_loader"),
    ("integrations/ultralytics_loader.py", "UltralyticsDataset.__init__"), ("build.py", "build_loader"),
]


def _find(tree: ast.Module, dotted: str):
    node = tree
    for part in dotted.split("."):
        node = next((n for n in ast.iter_child_nodes(node)
                     if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
    return node


def _params(fn) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
    return len([n for n in names if n not in ("self", "cls")])


def _imports(path: Path, package: Path) -> set:
    mod = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")[: -node.level if not path.name == "__init__.py" else len(mod.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith(package.name + ".") or name == package.name:
                out.add(name)
    return out


def main(package: Path) -> None:
    print(f"{'entry point':58s} {'params':>6s} {'lines':>6s}")
    for file, dotted in ENTRY_POINTS:
        path = package / file
        node = _find(ast.parse(path.read_text()), dotted) if path.exists() else None
        if node is None:
            continue
        params = _params(node) if isinstance(node, ast.FunctionDef) else "-"
        print(f"{file + '::' + dotted:58s} {params!s:>6s} {node.end_lineno - node.lineno + 1:6d}")

    files = {".".join(p.relative_to(package.parent).with_suffix("").parts): p for p in sorted(package.rglob("*.py"))}
    modules = {m for m in files if not m.endswith("__init__")}
    graph = {}
    for m in modules:
        deps = set()
        for name in _imports(files[m], package):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != m:
                deps.add(name)
        graph[m] = deps
    depth, back = {}, []

    def walk(m, stack):
        if m in stack:
            back.append(" -> ".join(stack[stack.index(m):] + [m]))
            return 0
        if m not in depth:
            depth[m] = 1 + max((walk(d, stack + [m]) for d in graph[m]), default=-1)
        return depth[m]

    for m in sorted(modules):
        walk(m, [])
    print(f"\nmodules: {len(modules)}; import arrows: {sum(map(len, graph.values()))}; "
          f"depth (longest chain of imports): {max(depth.values())}")
    print("arrows running back up (cycles): " + ("none" if not back else "; ".join(sorted(set(back)))))
    chain, m = [], max(depth, key=depth.get)
    while m is not None and m.rpartition(".")[2] not in chain:  # a cycle would go round for ever
        chain.append(m.rpartition(".")[2])
        m = max(graph[m], key=lambda d: depth[d], default=None)
    print("longest chain: " + " -> ".join(chain))
    folders = {}
    for m in modules:
        parts = m.split(".")
        folders.setdefault(parts[1] if len(parts) > 2 else "(top)", []).append(m)
    counts = sorted(folders.items(), key=lambda x: -len(x[1]))
    print("modules per folder: " + ", ".join(f"{f} {len(ms)}" for f, ms in counts))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "yolo_data")
