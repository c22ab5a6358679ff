"""Lint rules for the in-image probe (src/imagebuild/smoke/probe), beside its mypy run (scripts/lint.sh):

1. a parameter named `p` or `probe` is annotated `Probe` (the one object every section gets);
2. no function rebinds a parameter annotated with one of the probe's own classes (`Probe`, ...).

The probe's first real GPU run crashed because a loop rebound `p` to `torch.cuda.get_device_properties(i)` and the
section then wrote `p.doc[...]` on the device properties. torch is untyped to the probe's mypy run (no stubs: every
torch value is an Any, which mypy lets into any variable), so the type checker cannot see such a rebinding: rule 2
refuses every one (assignment, augmented assignment, for/with targets, walrus, except ... as, import-as and a
nested def/class of the same name).

    python scripts/lint_probe.py [DIR]    # exit 1 and one `FILE:LINE: ...` line per finding
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PROBE_DIR = Path(__file__).resolve().parents[1] / "src" / "imagebuild" / "smoke" / "probe"


def _bound_names(target: ast.AST) -> Iterator[ast.Name]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node


def _own_body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of a function's body, not descending into nested functions, lambdas, classes or comprehensions
    (they have scopes of their own: a nested function's parameters are checked as its own)."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(node))


PROBE_NAMES = ("p", "probe")


def probe_classes(sources: list[str]) -> set[str]:
    """The names of the classes the probe's modules define."""
    return {n.name for s in sources for n in ast.walk(ast.parse(s)) if isinstance(n, ast.ClassDef)}


def _annotation(arg: ast.arg) -> str:
    return ast.unparse(arg.annotation).strip("'\"") if arg.annotation is not None else ""


def rebound_parameters(source: str, filename: str, classes: set[str] = frozenset({"Probe"})) -> list[str]:
    """`FILE:LINE: ...` for each parameter named p/probe without `Probe`, and each rebinding of a parameter
    annotated with one of `classes` in `source`."""
    out = []
    for fn in ast.walk(ast.parse(source, filename)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = fn.args
        args = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        out += [f"{filename}:{fn.lineno}: function {fn.name}: parameter {x.arg!r} is the probe object: annotate it "
                "`Probe`" for x in args if x.arg in PROBE_NAMES and _annotation(x) != "Probe"]
        params = {x.arg for x in args if _annotation(x) in classes}
        for node in _own_body(fn):
            names: list[tuple[str, int]] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.With,
                                 ast.AsyncWith, ast.NamedExpr)):
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
                    targets = [node.target]
                else:
                    targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
                names = [(n.id, n.lineno) for t in targets for n in _bound_names(t)]
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names = [(node.name, node.lineno)]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [((a.asname or a.name).split(".")[0], node.lineno) for a in node.names]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [(node.name, node.lineno)]
            out += [f"{filename}:{line}: function {fn.name} rebinds its parameter {name!r}: give the new value a "
                    "name of its own" for name, line in names if name in params]
    return sorted(set(out), key=lambda x: (x.split(":")[0], int(x.split(":")[1])))


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else PROBE_DIR
    files = {path: path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py"))}
    classes = probe_classes(list(files.values())) | {"Probe"}
    problems = []
    for path, source in files.items():
        problems += rebound_parameters(source, str(path), classes)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
