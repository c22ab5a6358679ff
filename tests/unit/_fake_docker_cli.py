"""The one fake docker CLI of the unit tests (imported as `from _fake_docker_cli import install_fake_docker`): a
script that answers as docker 26.1 + buildx 0.13.1 did here and replays recorded rawjson streams
(fixtures/buildx/), put where engine/cli.py looks for the binary ($IMAGEBUILD_DOCKER_CLI). What it was asked is
written to the state folder: argv.json (the buildx build's argv, the secrets it saw, the Dockerfile), tagged, loaded.

Knobs (environment): FAKE_STREAM (the rawjson to replay), FAKE_RC (buildx's exit status), FAKE_SLEEP (seconds before
the stream), FAKE_BUILT (the ID `image inspect` answers), FAKE_LS (`buildx ls`), FAKE_ENGINE (the engine version),
FAKE_NO_BUILDX, FAKE_DEAD (a builder that does not answer), FAKE_DRIVER_STATUS, FAKE_LOAD_RC; for a build with a
`--target` (the runtime's env image, envimage.py): FAKE_KEY_TEXT (the env-key stage's torch.txt), FAKE_FAIL_TARGET and
FAKE_FAIL_STREAM (that target's build fails with that stream), FAKE_ARCHIVE (the image's archive, else a text),
FAKE_ENV_LAYERS (the env image's diff IDs, JSON). Every build's argv is also appended to builds.jsonl;
`imagebuild-env:` tags are in the engine once an archive of theirs was loaded (present).
"""

from __future__ import annotations

import base64
import json
import stat
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "buildx"
BUILT = "sha256:" + "cd" * 32

FAKE = r'''
import json, os, sys, time
args = sys.argv[1:]
state = os.environ["FAKE_STATE"]
def out(text): sys.stdout.write(text)
if args[:2] == ["buildx", "build"]:
    seen = {"argv": args, "secrets": {k: v for k, v in os.environ.items() if k.startswith("IMAGEBUILD_SECRET_")},
            "dockerfile": open(args[args.index("--file") + 1]).read()}
    with open(os.path.join(state, "argv.json"), "w") as fh:
        json.dump(seen, fh)
    with open(os.path.join(state, "builds.jsonl"), "a") as fh:
        fh.write(json.dumps(seen) + "\n")
    target = args[args.index("--target") + 1] if "--target" in args else None
    if os.environ.get("FAKE_SLEEP"):
        time.sleep(float(os.environ["FAKE_SLEEP"]))
    failing = os.environ.get("FAKE_FAIL_TARGET")
    stream = os.environ["FAKE_FAIL_STREAM"] if failing and failing == target else os.environ["FAKE_STREAM"]
    sys.stderr.write(open(stream).read())
    if failing and failing == target:
        sys.exit(1)
    for a in args:  # the archive output: buildx writes the image there; a local one: the target's files
        if a.startswith("type=docker,dest="):
            dest = a.split("dest=", 1)[1].split(",", 1)[0]
            if not target and os.environ.get("FAKE_ARCHIVE"):
                open(dest, "wb").write(open(os.environ["FAKE_ARCHIVE"], "rb").read())
            else:
                open(dest, "w").write("tag " + args[args.index("--tag") + 1] if target else "an image archive")
        if a.startswith("type=local,dest="):
            dest = a.split("dest=", 1)[1]
            os.makedirs(dest, exist_ok=True)
            open(os.path.join(dest, "torch.txt"), "w").write(os.environ.get("FAKE_KEY_TEXT", "torch==2.13.0\n"))
    sys.exit(int(os.environ.get("FAKE_RC", "0")))
if args[:2] == ["image", "load"]:
    archive = args[args.index("--input") + 1]
    data = open(archive, "rb").read()
    if data.startswith(b"tag "):  # a target's image (the env image): the engine holds its tag from now on
        with open(os.path.join(state, "present"), "a") as fh:
            fh.write(data[4:].decode() + "\n")
    else:
        open(os.path.join(state, "loaded"), "wb").write(data)
    sys.exit(int(os.environ.get("FAKE_LOAD_RC", "0")))
if args[:2] == ["image", "inspect"] and args[-1].startswith("imagebuild-env:"):
    present = os.path.join(state, "present")
    if not os.path.exists(present) or args[-1] not in open(present).read().split():
        sys.stderr.write("Error: No such image: " + args[-1] + "\n")
        sys.exit(1)
    layers = os.environ.get("FAKE_ENV_LAYERS", json.dumps(["sha256:" + "e1" * 32]))
    out((layers if "RootFS" in " ".join(args) else "sha256:" + "e0" * 32) + "\n")
    sys.exit(0)
if args[:1] == ["info"]:
    out(os.environ.get("FAKE_DRIVER_STATUS", '[["Backing Filesystem","extfs"]]') + "\n")
    sys.exit(0)
if args[:2] == ["image", "inspect"]:
    out(os.environ["FAKE_BUILT"] + "\n")
    sys.exit(0)
if args[:2] == ["image", "tag"]:
    open(os.path.join(state, "tagged"), "w").write(" ".join(args[2:]))
    sys.exit(0)
if args[:2] == ["buildx", "version"]:
    if not os.environ.get("FAKE_NO_BUILDX"):
        out("github.com/docker/buildx 0.13.1 0.13.1+ds1-3\n")
    sys.exit(int(os.environ.get("FAKE_NO_BUILDX", "0")))
if args[:2] == ["buildx", "ls"]:
    out(os.environ["FAKE_LS"])
    sys.exit(0)
if args[:2] == ["buildx", "inspect"]:
    if "--bootstrap" in args and os.environ.get("FAKE_DEAD") == args[-1]:
        sys.stderr.write("ERROR: failed to connect to tcp://10.0.0.9:1234\n")
        sys.exit(1)
    out("Name:   default\nDriver: docker\n")
    sys.exit(0)
if args[:1] == ["version"]:
    out(os.environ.get("FAKE_ENGINE", "26.1.5+dfsg1") + "\n")
    sys.exit(0)
sys.exit(2)
'''

LS = "\n".join(json.dumps(b) for b in [
    {"Name": "default", "Driver": "docker", "Nodes": [{"Status": "running", "Version": "v0.0.0+unknown"}]},
    {"Name": "farm", "Driver": "remote", "Nodes": [{"Status": "running", "Version": "v0.9.3"}]},
    {"Name": "k8s", "Driver": "kubernetes", "Nodes": [{"Status": "inactive", "Version": "v0.13.2"}]},
]) + "\n"




def install_fake_docker(tmp_path: Path, monkeypatch, built: str = BUILT) -> Path:
    """The fake `docker` in `tmp_path` as the binary engine/cli.py runs; returns its state folder (`tmp_path`)."""
    script = tmp_path / "docker"
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", str(script))
    monkeypatch.setenv("FAKE_STATE", str(tmp_path))
    monkeypatch.setenv("FAKE_BUILT", built)
    monkeypatch.setenv("FAKE_LS", LS)
    monkeypatch.setenv("FAKE_STREAM", str(FIXTURES / "built.rawjson"))
    return tmp_path


def _objects(text: str) -> tuple[list[dict], str]:
    """A recording's JSON objects, and buildx's plain lines after them."""
    decoder, pos, out = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text) or text[pos] != "{":
            return out, text[pos:]
        obj, pos = decoder.raw_decode(text, pos)
        out.append(obj)


def failing_rawjson(failing_output: list[str], beside: list[str] = ()) -> str:
    """The recorded failed run (fixtures/buildx/failed-run.rawjson: two parallel stages, `[pip 1/2]` fails with exit
    code 3) with the failing step printing `failing_output` instead (in 50-character log messages that split lines,
    as BuildKit sends them) and the stage beside it printing `beside`."""
    objs, plain = _objects((FIXTURES / "failed-run.rawjson").read_text())
    failing = next(v["digest"] for o in objs for v in o.get("vertexes", []) if v.get("error"))
    other = next(e["vertex"] for o in objs for e in o.get("logs", []) if e["vertex"] != failing)
    text = "\n".join(failing_output) + "\n"
    pieces = [text[i:i + 50] for i in range(0, len(text), 50)]
    out: list[dict] = []
    for obj in objs:
        if any(e["vertex"] == failing for e in obj.get("logs", [])):
            if pieces:  # the step's output, where the recording had it
                out += [{"logs": [{"vertex": failing, "stream": 2, "data": base64.b64encode(p.encode()).decode()}]}
                        for p in pieces]
                out += [{"logs": [{"vertex": other, "stream": 1,
                                   "data": base64.b64encode((line + "\n").encode()).decode()}]} for line in beside]
                pieces = []
            continue
        out.append(obj)
    return "".join(json.dumps(o, indent=2) + "\n" for o in out) + plain
