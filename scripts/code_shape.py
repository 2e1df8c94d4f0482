"""The shape of the code in figures, for a before/after: functions over a length, the
largest files, module-level mutable globals, and lines per top-level folder.

    python scripts/code_shape.py [ROOT] [--max-lines 40] [--top 8]

Counts Python under services/, libs/ and sdk/ (generated code and tests excluded). A
function's length is its def line through its last line, docstring included, as a reader
scrolls it.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
from collections import Counter

FOLDERS = ("services", "libs", "sdk")


def sources(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for folder in FOLDERS for p in (root / folder).rglob("*.py") if "/gen/" not in str(p))


def long_functions(tree: ast.Module, limit: int) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append((node.name, length))
    return found


MUTATORS = {"append", "extend", "update", "setdefault", "add", "pop", "popitem", "clear", "insert", "remove",
            "discard"}


def mutable_globals(tree: ast.Module) -> list[str]:
    """Module-level names that the module's functions rebind (`global`) or change in place
    (item assignment or a mutating method: a cache, a registry, a counter)."""
    module_names = {t.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(t, ast.Name)}
    changed: set[str] = set()
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Global):
                changed.update(node.names)
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                changed.update(t.value.id for t in targets
                               if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.attr in MUTATORS):
                changed.add(node.func.value.id)
    return sorted(changed & module_names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", default=".", type=pathlib.Path)
    parser.add_argument("--max-lines", type=int, default=40)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    root = args.root.resolve()
    sizes: list[tuple[int, str]] = []
    longs: list[tuple[str, str, int]] = []
    globs: list[tuple[str, str]] = []
    per_folder: Counter[str] = Counter()
    for path in sources(root):
        text = path.read_text()
        rel = str(path.relative_to(root))
        lines = text.count("\n")
        sizes.append((lines, rel))
        per_folder["/".join(rel.split("/")[:2])] += lines
        tree = ast.parse(text)
        longs += [(rel, name, n) for name, n in long_functions(tree, args.max_lines)]
        globs += [(rel, name) for name in mutable_globals(tree)]
    print(f"files: {len(sizes)}, lines: {sum(n for n, _ in sizes)}")
    print(f"functions over {args.max_lines} lines: {len(longs)}")
    for rel, name, n in sorted(longs, key=lambda x: -x[2]):
        print(f"  {n:4d}  {rel}:{name}")
    print(f"largest files (top {args.top}):")
    for n, rel in sorted(sizes, reverse=True)[: args.top]:
        print(f"  {n:4d}  {rel}")
    print(f"module-level mutable globals: {len(globs)}")
    for rel, name in globs:
        print(f"  {rel}:{name}")
    print("lines per folder:")
    for folder, n in sorted(per_folder.items(), key=lambda x: -x[1]):
        print(f"  {n:6d}  {folder}")


if __name__ == "__main__":
    main()
