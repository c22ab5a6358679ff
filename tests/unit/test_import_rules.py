"""Import rules of docs/ARCHITECTURE.md ("Import rules"), checked over the source with `ast`: every import statement
under src/imagebuild counts, at module level, inside functions and under `if TYPE_CHECKING:` alike.

A failure names FILE:LINE, what is imported and the rule it breaks. To change a rule, change the table in
docs/ARCHITECTURE.md and ALLOWED below together.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGE = SRC / "imagebuild"
TESTS = ROOT / "tests"

FOUNDATION_MODULES = {"imagebuild", "imagebuild.models", "imagebuild.errors", "imagebuild.secrets",
                      "imagebuild.inputs", "imagebuild.units", "imagebuild.files", "imagebuild.retry",
                      "imagebuild.dates", "imagebuild.backends", "imagebuild.pasteable", "imagebuild.values",
                      "imagebuild.hints", "imagebuild.smokeresult", "imagebuild.phases"}
PURE = {"foundation", "compat", "oci", "lock", "matrix", "resolve", "render", "plan"}
# layer -> the other layers it may import (its own layer is always allowed)
ALLOWED: dict[str, set[str]] = {
    "foundation": set(),
    "compat": {"foundation"},
    "oci": {"foundation"},
    "engine": {"foundation"},
    "host": {"foundation"},  # GPUs/NUMA/memory read under a root directory: no docker, no stage
    "inventory": {"foundation", "oci", "engine"},
    "lock": {"foundation"},
    "matrix": {"foundation", "compat", "oci"},
    "resolve": {"foundation", "compat", "oci", "matrix"},
    "render": {"foundation", "compat", "oci", "matrix", "resolve", "lock"},
    "plan": {"foundation", "compat", "oci", "matrix", "resolve", "render", "lock"},
    "report": PURE,
    "record": PURE,
    "builder": PURE | {"engine", "report", "record", "inventory"},
    "push": PURE | {"engine", "record"},
    "smoke": PURE | {"engine", "host", "probe", "record"},  # host: the emulator QEMU's version for the results
    "catalog": PURE | {"record"},  # the registry through oci, smoke results/sizes from the record; no engine
    "launch": PURE | {"engine", "host", "record"},
    "sign": PURE | {"record"},  # cosign + the registry through oci; provenance from the record; no engine
    # build -> SBOM -> test -> push -> report over one plan and record: the one layer that drives the stages
    "pipeline": PURE | {"engine", "host", "report", "record", "builder", "push", "smoke", "catalog", "launch",
                         "inventory", "sign", "audit"},
    # flags -> pipeline.settings.RunOptions -> pipeline; never the builder (its steps are the pipeline's)
    "commands": PURE | {"pipeline", "engine", "host", "report", "record", "push", "smoke", "catalog", "launch",
                         "inventory", "export", "sign", "audit"},
    # issue 42: installed packages against advisories; the Python half (python.py, osv.py, cvss.py) needs only packaging
    # the OS half (debian.py, os.py, policy.py): the pinned keys (compat), Debian version order (lock.apt), the policy
    "audit": {"foundation", "compat", "lock", "matrix"},
    "export": PURE | {"engine", "record"},  # `imagebuild export`: engine calls only through engine/rootfs.py
    "cli": {"foundation", "commands"},
    "probe": set(),  # runs inside images: see probe_rule
    "suite": set(),  # a separate pytest run: never imports imagebuild
}
NO_DOCKER = {"foundation", "compat", "host", "lock", "matrix", "resolve", "render", "plan", "report", "record",
             "sign"}
ENGINE_CLIENT_OWNERS = {"engine", "suite"}  # suite: separate process, inspects through testinfra's docker backend
# Only engine/ talks to the engine API: no docker import and no `.api` (the SDK's low-level client) elsewhere.
ENGINE_API_OWNERS = {"engine", "suite"}
# the docker config's credential helpers (`docker-credential-*`), read through the SDK: not the engine API
DOCKER_IMPORTS_ALLOWED = {"imagebuild.oci.auth": {"docker.auth", "docker.errors"}}
PROBE_THIRD_PARTY = {"torch", "transformer_engine", "numpy"}  # numpy: torch's optional interop, guarded


@dataclass(frozen=True)
class Imp:
    path: Path
    line: int
    target: str  # absolute dotted module name (for `from M import n`: M.n when that is a module, else M)
    level: int = 0  # relative import level as written


# a backend plug-in (builder/backends/<name>/) is loaded by the table's row; these modules still import one directly
PLUGIN_IMPORTERS = {"imagebuild.builder.bake"}  # TODO issue 26: bake's secret ids, one more consumer of the plan


def plugin_of(module: str) -> str | None:
    """The backend plug-in folder a module belongs to (builder/backends/<name>/...), else None."""
    parts = module.split(".")
    return parts[3] if len(parts) > 3 and parts[:3] == ["imagebuild", "builder", "backends"] else None


def layer_of(module: str) -> str | None:
    """The layer of a module under imagebuild (None: not assigned to any layer yet)."""
    if module in FOUNDATION_MODULES:
        return "foundation"
    parts = module.split(".")
    if parts[0] != "imagebuild" or len(parts) < 2:
        return None
    top = parts[1]
    if top in ("cli", "__main__"):
        return "cli"
    if top == "smoke" and len(parts) > 2 and parts[2] in ("probe", "suite"):
        return parts[2]
    return top if top in ALLOWED else None


def module_name(path: Path, src: Path) -> str:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str, src: Path) -> bool:
    base = src.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, src: Path) -> list[Imp]:
    """Every import in the file (any depth in the tree), resolved to absolute module names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = module_name(path, src)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: list[Imp] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Imp(path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(p for p in [*base_parts, node.module or ""] if p)
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if alias.name != "*" and _is_module(sub, src) else base
                out.append(Imp(path, node.lineno, target, node.level))
    return out


def engine_clients_of(path: Path) -> list[tuple[int, str]]:
    """Places that create a Docker engine client: `.from_env`, `from docker import from_env`, `DockerClient(...)`,
    `APIClient(...)`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "from_env":
            found.append((node.lineno, f"{ast.unparse(node)}"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "docker":
            found += [(node.lineno, f"from {node.module} import from_env") for a in node.names if a.name == "from_env"]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("DockerClient", "APIClient"):
                found.append((node.lineno, f"{ast.unparse(func)}(...)"))
    return found


def engine_api_uses_of(path: Path) -> list[tuple[int, str]]:
    """Places that use the SDK's low-level client: any `<x>.api` attribute (`client.api.inspect_image(...)`)."""
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Attribute) and node.attr == "api"]


PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "system",
                 "execv", "execvp", "execvpe", "spawnv", "spawnvp", "create_subprocess_exec", "create_subprocess_shell"}
DOCKER_CLI_OWNERS = {"engine", "suite"}  # suite: a separate pytest run that inspects the container it tests


def _names_docker(node: ast.AST) -> bool:
    """A command naming the docker CLI: "docker ..." as a string, or a list/tuple whose first item is "docker"
    (or a path ending in /docker)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        first = node.value.strip().split(" ", 1)[0]
        return first == "docker" or first.endswith("/docker")
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return _names_docker(node.elts[0])
    return False


def docker_processes_of(path: Path) -> list[tuple[int, str]]:
    """Places that start the docker CLI themselves: a process call (subprocess.run/Popen/..., os.system, asyncio's
    create_subprocess_*) whose command names docker, and any reading of IMAGEBUILD_DOCKER_CLI (the binary is chosen
    in engine/cli.py only)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            command = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
            if name in PROCESS_CALLS and command is not None and _names_docker(command):
                found.append((node.lineno, f"{ast.unparse(func)}({ast.unparse(command)[:40]}...)"))
        elif isinstance(node, ast.Constant) and node.value == "IMAGEBUILD_DOCKER_CLI":
            found.append((node.lineno, "IMAGEBUILD_DOCKER_CLI"))
    return found


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def check_source(src: Path = SRC) -> list[str]:
    """All rule violations under src/imagebuild, one line each: FILE:LINE: what: rule."""
    problems: list[str] = []
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted((src / "imagebuild").rglob("*.py")):
        me = module_name(path, src)
        layer = layer_of(me)
        if layer is None:
            problems.append(f"{rel(path)}:1: module {me} belongs to no layer: add its folder to the import rules "
                            "(docs/ARCHITECTURE.md and ALLOWED in tests/unit/test_import_rules.py)")
            continue
        for imp in imports_of(path, src):
            where = f"{rel(path)}:{imp.line}"
            top = imp.target.split(".")[0]
            if layer == "probe":
                if imp.level:
                    problems.append(f"{where}: relative import in smoke/probe: rule: the probe imports itself as "
                                    "`probe.*` (what it is inside the zipapp)")
                elif top == "imagebuild":
                    problems.append(f"{where}: smoke/probe imports {imp.target}: rule: the in-image probe never "
                                    "imports imagebuild (images have only the standard library and torch)")
                elif top not in stdlib and top != "probe" and top not in PROBE_THIRD_PARTY:
                    problems.append(f"{where}: smoke/probe imports {imp.target}: rule: the probe imports only the "
                                    f"standard library, {', '.join(sorted(PROBE_THIRD_PARTY))} and probe.*")
                continue
            if layer == "suite":
                if top == "imagebuild":
                    problems.append(f"{where}: smoke/suite imports {imp.target}: rule: the testinfra suite is a "
                                    "separate pytest run and never imports imagebuild")
                continue
            if top == "docker" and layer in NO_DOCKER:
                problems.append(f"{where}: {layer} imports {imp.target}: rule: {layer} never imports docker "
                                "(validate/plan/render work without the SDK)")
            elif (top == "docker" and layer not in ENGINE_API_OWNERS
                  and imp.target not in DOCKER_IMPORTS_ALLOWED.get(me, set())):
                problems.append(f"{where}: {layer} imports {imp.target}: rule: only engine/ talks to the engine "
                                "(use imagebuild.engine.store: ImageStore, as_store)")
            if top != "imagebuild":
                continue
            target_layer = layer_of(imp.target)
            if target_layer is None:
                problems.append(f"{where}: {me} imports {imp.target}, which belongs to no layer")
            elif target_layer == "commands" and layer != "commands" and layer != "cli":
                problems.append(f"{where}: {layer} imports {imp.target}: rule: commands/ is the top layer; "
                                "nothing imports it (cli loads commands by name)")
            elif target_layer != layer and target_layer not in ALLOWED[layer]:
                allowed = ", ".join(sorted(ALLOWED[layer])) or "nothing else"
                problems.append(f"{where}: {layer} imports {imp.target} ({target_layer}): rule: {layer} may import "
                                f"only {allowed}")
            if me == "imagebuild.builder.backend" and (
                    target_layer == "engine" or imp.target.startswith("imagebuild.builder.backends")):
                problems.append(f"{where}: builder/backend.py imports {imp.target}: rule: the backend seam imports "
                                "neither the engine nor a backend")
            plugin = plugin_of(imp.target)
            if plugin is not None and plugin_of(me) != plugin and me not in PLUGIN_IMPORTERS:
                problems.append(f"{where}: {me} imports {imp.target}: rule: a backend's folder "
                                f"(builder/backends/{plugin}/) is imported only by itself; the run gets it "
                                "through builder/backends/__init__.py and the table imagebuild/backends.py")
        if me == "imagebuild.builder.backend":
            problems += [f"{rel(path)}:{i.line}: builder/backend.py imports {i.target}: rule: the backend seam "
                         "never imports docker" for i in imports_of(path, src) if i.target.split(".")[0] == "docker"]
        if layer not in ENGINE_API_OWNERS:
            problems += [f"{rel(path)}:{line}: {what} in {layer}: rule: only engine/ talks to the engine API "
                         "(use imagebuild.engine.store: ImageStore, as_store)" for line, what in engine_api_uses_of(path)]
        if layer not in DOCKER_CLI_OWNERS:
            problems += [f"{rel(path)}:{line}: {what} in {layer}: rule: only engine/ runs the docker CLI "
                         "(use imagebuild.engine.cli: run, start)" for line, what in docker_processes_of(path)]
        if layer not in ENGINE_CLIENT_OWNERS:
            problems += [f"{rel(path)}:{line}: {what} in {layer}: rule: only engine/ creates engine clients "
                         "(use imagebuild.engine.connect(purpose))" for line, what in engine_clients_of(path)]
    return problems


def test_source_follows_the_import_rules():
    problems = check_source()
    assert not problems, "import rules broken (docs/ARCHITECTURE.md, Import rules):\n" + "\n".join(problems)


def test_pure_stages_do_not_load_docker_transitively():
    """Importing the stages validate/plan/render use must not load the docker SDK on the way (a fresh interpreter)."""
    modules = ["imagebuild.compat", "imagebuild.matrix", "imagebuild.resolve", "imagebuild.render", "imagebuild.plan",
               "imagebuild.report", "imagebuild.record", "imagebuild.host"]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "    if 'docker' in sys.modules:\n"
            "        sys.exit('importing ' + m + ' loaded docker')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr


def test_help_and_the_engine_free_commands_load_neither_docker_nor_the_stages():
    """`imagebuild --help` loads every command module (cli lists them): their module-level imports stay light, so
    validate/plan/render run without the SDK and --help stays fast (a fresh interpreter)."""
    code = ("import sys\n"
            "import click\n"
            "from imagebuild.cli import cli\n"
            "ctx = click.Context(cli)\n"
            "for name in cli.list_commands(ctx):\n"
            "    cli.get_command(ctx, name)\n"
            "heavy = sorted(m for m in sys.modules if m == 'docker' or m.startswith(('imagebuild.builder', "
            "'imagebuild.pipeline.flow', 'imagebuild.smoke', 'imagebuild.push', 'imagebuild.engine')))\n"
            "sys.exit('loaded: ' + ', '.join(heavy) if heavy else 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr


def test_every_layer_in_the_rules_is_documented():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = doc.split("## Import rules", 1)[1].split("\n## ", 1)[0]
    for layer in ALLOWED:
        name = {"probe": "smoke/probe", "suite": "smoke/suite"}.get(layer, layer)
        assert f"`{name}" in section or f"{name}:" in section, f"layer {name} missing from docs/ARCHITECTURE.md"


def test_no_test_module_imports_another_test_module_or_conftest():
    problems = []
    for path in sorted(TESTS.rglob("*.py")):
        if "golden" in path.parts or "fixtures" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top.startswith("test_") or top == "conftest":
                    problems.append(f"{rel(path)}:{node.lineno}: imports {name}: rule: test modules import neither "
                                    "other test modules nor conftest; shared helpers go to an underscore module "
                                    "(tests/unit/_support.py, tests/integration/_helpers.py), shared fixtures to "
                                    "conftest.py")
    assert not problems, "\n".join(problems)


# -- the checker itself ------------------------------------------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "src"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for d in sorted({p.parent for p in src.rglob("*.py")}):
        (d / "__init__.py").touch()
    return src


@pytest.mark.parametrize(("files", "expected"), [
    ({"imagebuild/plan/x.py": "def f():\n    from imagebuild.builder import executor\n", "imagebuild/builder/executor.py": ""},
     "imagebuild/plan/x.py:2: plan imports imagebuild.builder.executor (builder): rule: plan may import only"),
    ({"imagebuild/matrix/x.py": "def f():\n    import docker\n"},
     "imagebuild/matrix/x.py:2: matrix imports docker: rule: matrix never imports docker"),
    ({"imagebuild/push/x.py": "import docker\nc = docker.from_env()\n"},
     "imagebuild/push/x.py:2: docker.from_env in push: rule: only engine/ creates engine clients"),
    ({"imagebuild/builder/x.py": "def f(client):\n    return client.api.inspect_image('x')\n"},
     "imagebuild/builder/x.py:2: client.api in builder: rule: only engine/ talks to the engine API"),
    ({"imagebuild/push/x.py": "def f():\n    import docker.errors\n"},
     "imagebuild/push/x.py:2: push imports docker.errors: rule: only engine/ talks to the engine"),
    ({"imagebuild/launch/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import docker\n"},
     "imagebuild/launch/x.py:3: launch imports docker: rule: only engine/ talks to the engine"),
    ({"imagebuild/smoke/probe/x.py": "from imagebuild.secrets import redact\n"},
     "imagebuild/smoke/probe/x.py:1: smoke/probe imports imagebuild.secrets: rule: the in-image probe never"),
    ({"imagebuild/smoke/probe/x.py": "import yaml\n"},
     "imagebuild/smoke/probe/x.py:1: smoke/probe imports yaml: rule: the probe imports only the standard library"),
    ({"imagebuild/oci/x.py": "from ..engine import connect\n", "imagebuild/engine/connect.py": ""},
     "imagebuild/oci/x.py:1: oci imports imagebuild.engine.connect (engine): rule: oci may import only foundation"),
    ({"imagebuild/builder/x.py": "from imagebuild.commands import build\n", "imagebuild/commands/build.py": ""},
     "imagebuild/builder/x.py:1: builder imports imagebuild.commands.build: rule: commands/ is the top layer"),
    ({"imagebuild/builder/backend.py": "from imagebuild.engine import connect\n"},
     "imagebuild/builder/backend.py:1: builder/backend.py imports imagebuild.engine: rule: the backend seam"),
    ({"imagebuild/builder/backends/buildkit/x.py": "import subprocess\nsubprocess.run(['docker', 'image', 'load'])\n"},
     "imagebuild/builder/backends/buildkit/x.py:2: subprocess.run(['docker', 'image', 'load']...) in builder: rule: "
     "only engine/ runs the docker CLI"),
    ({"imagebuild/push/x.py": "from subprocess import Popen\nPopen(('/usr/bin/docker', 'push', 'x'))\n"},
     "imagebuild/push/x.py:2: Popen(('/usr/bin/docker', 'push', 'x')...) in push: rule: only engine/ runs the docker"),
    ({"imagebuild/smoke/x.py": "import os\nos.system('docker rm -f x')\n"},
     "imagebuild/smoke/x.py:2: os.system('docker rm -f x'...) in smoke: rule: only engine/ runs the docker CLI"),
    ({"imagebuild/builder/x.py": "import os\nDOCKER = os.environ.get('IMAGEBUILD_DOCKER_CLI', 'docker')\n"},
     "imagebuild/builder/x.py:2: IMAGEBUILD_DOCKER_CLI in builder: rule: only engine/ runs the docker CLI"),
    ({"imagebuild/newstage/x.py": ""}, "imagebuild/newstage/x.py:1: module imagebuild.newstage.x belongs to no layer"),
    ({"imagebuild/builder/x.py": "from imagebuild.builder.backends.classic import build\n",
      "imagebuild/builder/backends/classic/build.py": ""},
     "imagebuild/builder/x.py:1: imagebuild.builder.x imports imagebuild.builder.backends.classic.build: rule: a "
     "backend's folder"),
    ({"imagebuild/commands/x.py": "def f():\n    from imagebuild.builder import executor\n",
      "imagebuild/builder/executor.py": ""},
     "imagebuild/commands/x.py:2: commands imports imagebuild.builder.executor (builder): rule: commands may import"),
    ({"imagebuild/builder/x.py": "from imagebuild.pipeline import flow\n", "imagebuild/pipeline/flow.py": ""},
     "imagebuild/builder/x.py:1: builder imports imagebuild.pipeline.flow (pipeline): rule: builder may import"),
])
def test_checker_finds_a_planted_violation(tmp_path, files, expected):
    src = _tree(tmp_path, files)
    problems = [p.replace(str(src) + "/", "") for p in check_source(src)]
    assert any(expected in p for p in problems), problems


def test_checker_accepts_allowed_imports(tmp_path):
    src = _tree(tmp_path, {
        "imagebuild/plan/x.py": "from imagebuild.render import image\nfrom imagebuild import models\n",
        "imagebuild/render/image.py": "", "imagebuild/models.py": "",
        "imagebuild/builder/x.py": "def f():\n    from imagebuild.engine import connect\n",
        "imagebuild/engine/connect.py": "import docker\nc = docker.from_env()\nc.api.ping()\n",
        "imagebuild/engine/cli.py": "import subprocess\nsubprocess.run(['docker', 'version'])\n",
        "imagebuild/builder/y.py": "import subprocess\nsubprocess.run(['git', 'rev-parse', 'HEAD'])\n",
        "imagebuild/oci/auth.py": "import docker.auth\n",
        "imagebuild/smoke/probe/x.py": "import json\nfrom probe.common import Probe\n\ndef f():\n    import torch\n",
        "imagebuild/pipeline/flow.py": "from imagebuild.builder import x\nfrom imagebuild.smoke import runner\n",
        "imagebuild/smoke/runner.py": "",
        "imagebuild/commands/build.py": "from imagebuild.pipeline import flow\n",
    })
    assert check_source(src) == []


def test_test_module_basenames_are_unique():
    """pytest's default import mode keys test modules by basename: two `test_x.py` in tests/ stop the collection."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
        seen.setdefault(path.name, path)
    assert not clashes, "same basename: " + "; ".join(clashes)
