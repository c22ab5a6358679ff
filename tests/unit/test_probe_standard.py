"""The in-image probe proves the library as it is shipped and uses only standard process machinery (issue 38 item 5):
an AST scan of every probe module finds no thread start but the watchdog's timer, no fork by hand (child probes
come from multiprocessing's forkserver or subprocess: probe/children.py), and no write into torch (an attribute or
item assigned, deleted or setattr'd on torch or on anything imported from it).

The one thread: watchdog.watchdog's threading.Timer, the probe's overall timeout. It must fire while the main thread
is stuck in C (a CUDA call, a hung import), where a signal handler would never run; it forks nothing, runs no
library code, and the probe's own process forks nothing beside it.

The one kind of write into torch: tf32's switch of torch's documented TF32 setting (torch.backends.cuda.matmul's
fp32_precision, allow_tf32 before torch 2.9), what tf32.speedup measures with and without, put back after it: a
setting a user sets, not a change of torch's code.
"""

from __future__ import annotations

import ast

import pytest

from imagebuild.smoke.probe import pack

PROBE_FILES = sorted(pack.PACKAGE_DIR.glob("*.py"))
ALLOWED_THREADS = {("watchdog.py", "watchdog", "threading.Timer")}
ALLOWED_TORCH_WRITES = {("tf32.py", fn, f"torch.backends.cuda.matmul.{flag}")
                        for fn in ("set_tf32", "restore_tf32") for flag in ("fp32_precision", "allow_tf32")}

# calls that start a thread or fork a process by hand
THREAD_CALLS = ("threading.Thread", "threading.Timer", "Thread", "Timer", "_thread.start_new_thread",
                "start_new_thread", "ThreadPoolExecutor", "ProcessPoolExecutor", "multiprocessing.Pool", "Pool")
FORK_CALLS = ("os.fork", "fork", "os.forkpty", "forkpty", "pty.fork", "os.register_at_fork")
FORK_CONTEXTS = ("fork",)  # multiprocessing.get_context("fork") / set_start_method("fork"): a fork of this process


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _root(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _torch_names(tree: ast.AST) -> set[str]:
    """Names bound to torch or to something of torch's: `import torch[.x] [as y]`, `from torch.x import y [as z]`,
    and module aliases `nn = torch.nn` (an attribute chain of such a name)."""
    names = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            names |= {a.asname or a.name for a in node.names}
    changed = True
    while changed:  # aliases of aliases
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and _root(node.value) in names:
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id not in names:
                        names.add(t.id)
                        changed = True
    return names


def findings(source: str, filename: str) -> list[str]:
    """`FILE:LINE: ...` for each thread start, fork by hand and write into torch in `source`."""
    tree = ast.parse(source, filename)
    torch_names = _torch_names(tree)
    out = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def where(node: ast.AST) -> str:
        inside = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
        return max(inside, key=lambda f: f.lineno).name if inside else ""

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in THREAD_CALLS and (filename, where(node), name) not in ALLOWED_THREADS:
                out.append(f"{filename}:{node.lineno}: starts a thread ({name})")
            if name in FORK_CALLS:
                out.append(f"{filename}:{node.lineno}: forks by hand ({name})")
            if name.split(".")[-1] in ("get_context", "set_start_method") and node.args and isinstance(
                    node.args[0], ast.Constant) and node.args[0].value in FORK_CONTEXTS:
                out.append(f"{filename}:{node.lineno}: forks this process ({name}({node.args[0].value!r}))")
            if name in ("setattr", "delattr") and node.args and _root(node.args[0]) in torch_names:
                out.append(f"{filename}:{node.lineno}: {name} on torch ({ast.unparse(node.args[0])})")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if _dotted(base) in ("threading.Thread", "Thread"):
                    out.append(f"{filename}:{node.lineno}: a thread class ({node.name})")
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in torch_names:
                    if (filename, where(node), ast.unparse(t)) not in ALLOWED_TORCH_WRITES:
                        out.append(f"{filename}:{node.lineno}: writes into torch ({ast.unparse(t)})")
                    break
    return out


def test_the_probe_starts_no_thread_forks_nothing_by_hand_and_patches_nothing_in_torch():
    assert len(PROBE_FILES) > 20
    found = [f for path in PROBE_FILES for f in findings(path.read_text(), path.name)]
    assert found == []


def test_the_watchdog_timer_is_the_one_thread():
    source = (pack.PACKAGE_DIR / "watchdog.py").read_text()
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and _dotted(n.func) in THREAD_CALLS]
    assert [_dotted(c.func) for c in calls] == ["threading.Timer"]
    assert findings(source.replace("def watchdog(", "def other("), "watchdog.py") != []  # allowed only there


def test_tf32_writes_only_the_tf32_setting_and_only_in_its_two_switches():
    source = (pack.PACKAGE_DIR / "tf32.py").read_text()
    assert findings(source, "tf32.py") == []
    assert len(findings(source.replace("def set_tf32(", "def other("), "tf32.py")) == 2
    assert findings(source, "amp.py") != []  # the same lines elsewhere


# what the scan refuses: the vector-ISA warm-up the probe used to run (threads, and Inductor's lookup replaced in its
# module), the zygote's hand fork, and other ways of writing into torch
@pytest.mark.parametrize("source, what", [
    ("from torch._inductor import cpu_vec_isa\nimport threading\n"
     "def warm():\n    t = threading.Thread(target=print)\n    t.start()\n"
     "    cpu_vec_isa.valid_vec_isa_list = lambda: []\n", ["starts a thread", "writes into torch"]),
    ("import os\ndef fork_here():\n    pid = os.fork()\n", ["forks by hand"]),
    ("import multiprocessing\nctx = multiprocessing.get_context('fork')\n", ["forks this process"]),
    ("from threading import Thread\nclass T(Thread):\n    pass\n", ["a thread class"]),
    ("def f(p):\n    torch = p.import_torch()\n    torch._dynamo.config.cache_size_limit = 1\n", ["writes into torch"]),
    ("def f(torch):\n    nn = torch.nn\n    nn.Linear.forward = None\n", ["writes into torch"]),
    ("import torch.backends.cudnn as cudnn\ncudnn.benchmark = True\n", ["writes into torch"]),
    ("import torch\ntorch.__dict__['x'] = 1\n", ["writes into torch"]),
    ("import torch\nsetattr(torch.cuda, 'x', 1)\n", ["setattr on torch"]),
    ("import torch\ndel torch.cuda.x\n", ["writes into torch"]),
])
def test_the_scan_finds(source, what):
    got = findings(source, "x.py")
    assert [w for w in what if not any(w in g for g in got)] == [], got


def test_the_scan_lets_the_probe_read_torch_and_write_its_own_objects():
    source = ("import multiprocessing, subprocess\n"
              "def f(torch, p):\n    x = torch.ones(2)\n    p.doc['a'] = torch.cuda.is_available()\n"
              "    model = torch.nn.Linear(2, 2)\n    model.eval()\n    ctx = multiprocessing.get_context('forkserver')\n"
              "    subprocess.Popen(['true'])\n")
    assert findings(source, "x.py") == []
