"""The one fake docker CLI of the unit tests (imported as `from _fake_docker_cli import install_fake_docker`): a
script that answers as docker 26.1 + buildx 0.13.1 did here and replays recorded rawjson streams
(fixtures/buildx/), put where engine/cli.py looks for the binary ($IMAGEBUILD_DOCKER_CLI). What it was asked is
written to the state folder: argv.json (the buildx build's argv, the secrets it saw, the Dockerfile), tagged, loaded.

Knobs (environment): FAKE_STREAM (the rawjson to replay), FAKE_RC (buildx's exit status), FAKE_SLEEP (seconds before
the stream), FAKE_BUILT (the ID `image inspect` answers), FAKE_LS (`buildx ls`), FAKE_ENGINE (the engine version),
FAKE_NO_BUILDX, FAKE_DEAD (a builder that does not answer), FAKE_DRIVER_STATUS, FAKE_LOAD_RC; for a build with a
`--target` (the runtime's env image, envimage.py): FAKE_KEY_TEXT (the env-key stage's torch.txt), FAKE_FAIL_TARGET and
FAKE_FAIL_STREAM (that target's build fails with that stream), FAKE_ARCHIVE (a docker archive whose blobs the
image's export writes into the layout, else an image of one layer saying which build made it), FAKE_ENV_LAYERS (the
env image's diff IDs, JSON), FAKE_NO_METADATA (no --metadata-file written), FAKE_ENGINE_LACKS (a load lacking a
layer fails, as on an engine that holds none). Every build's argv is also appended to builds.jsonl, every load's
name, manifest and which layers it carried to loads.jsonl; `imagebuild-env:` tags are in the engine once an image of
theirs was loaded (present).
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
import hashlib, json, os, sys, tarfile, time
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
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
    for a in args:  # the layout output: buildx writes the image's blobs there; a local one: the target's files
        if a.startswith("type=oci,tar=false,dest="):
            layout = a.split("dest=", 1)[1].split(",", 1)[0]
            blobs = os.path.join(layout, "blobs", "sha256")
            os.makedirs(blobs, exist_ok=True)
            if not target and os.environ.get("FAKE_ARCHIVE"):  # a real export's blobs (fixtures/buildx/)
                with tarfile.open(os.environ["FAKE_ARCHIVE"]) as tar:
                    for m in tar.getmembers():
                        if m.name.startswith("blobs/sha256/"):
                            open(os.path.join(blobs, m.name[13:]), "wb").write(tar.extractfile(m).read())
                    desc = json.load(tar.extractfile("index.json"))["manifests"][0]
            else:  # an image of one layer, its text saying which build made it
                if target == "env" and os.environ.get("FAKE_ARCHIVE"):  # and the layers the image stands on
                    with tarfile.open(os.environ["FAKE_ARCHIVE"]) as tar:
                        child = json.load(tar.extractfile("index.json"))["manifests"][0]["digest"][7:]
                        for layer in json.load(tar.extractfile("blobs/sha256/" + child))["layers"][:-1]:
                            name = "blobs/sha256/" + layer["digest"][7:]
                            open(os.path.join(layout, name), "wb").write(tar.extractfile(name).read())
                said = ("tag " + args[args.index("--tag") + 1] if target else "an image archive").encode()
                def put(data):
                    d = hashlib.sha256(data).hexdigest()
                    open(os.path.join(blobs, d), "wb").write(data)
                    return {"digest": "sha256:" + d, "size": len(data)}
                config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [put(said)["digest"]]}}).encode()
                manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **put(config)},
                                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                                                   **put(said)}]}).encode()
                desc = {"mediaType": OCI_MANIFEST, **put(manifest)}
            if os.environ.get("FAKE_NO_METADATA"):
                continue
            meta = args[args.index("--metadata-file") + 1]
            json.dump({"containerimage.descriptor": desc, "containerimage.digest": desc["digest"]}, open(meta, "w"))
        if a.startswith("type=local,dest="):
            dest = a.split("dest=", 1)[1]
            os.makedirs(dest, exist_ok=True)
            open(os.path.join(dest, "torch.txt"), "w").write(os.environ.get("FAKE_KEY_TEXT", "torch==2.13.0\n"))
    sys.exit(int(os.environ.get("FAKE_RC", "0")))
if args[:2] == ["image", "load"]:
    archive = args[args.index("--input") + 1]
    with tarfile.open(archive) as tar:
        [entry] = json.load(tar.extractfile("index.json"))["manifests"]
        have = {m.name[13:] for m in tar.getmembers() if m.name.startswith("blobs/sha256/")}
        manifest = json.load(tar.extractfile("blobs/sha256/" + entry["digest"][7:]))
        layers = [l["digest"][7:] for l in manifest["layers"]]
        said = tar.extractfile("blobs/sha256/" + layers[-1]).read() if layers[-1] in have else b""
    with open(os.path.join(state, "loads.jsonl"), "a") as fh:
        fh.write(json.dumps({"name": entry["annotations"]["io.containerd.image.name"], "digest": entry["digest"],
                             "layers": [l in have for l in layers]}) + "\n")
    if os.environ.get("FAKE_ENGINE_LACKS") and not all(l in have for l in layers):  # a fresh engine: it holds none
        sys.stderr.write("failed to unpack loaded image: content digest sha256:" + layers[0] + ": not found\n")
        sys.exit(1)
    if said.startswith(b"tag "):  # a target's image (the env image): the engine holds its tag from now on
        with open(os.path.join(state, "present"), "a") as fh:
            fh.write(said[4:].decode() + "\n")
    else:
        open(os.path.join(state, "loaded"), "wb").write(open(archive, "rb").read())
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
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "layer-cache"))  # the held layout (engine/held.py)
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


def loads(state: Path) -> list[dict]:
    """What the fake engine was asked to load, in order: each archive's image name, manifest digest and, per layer,
    whether the archive carried it."""
    path = state / "loads.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
