"""The one fake engine of the unit tests: an in-memory image store implementing `imagebuild.engine.store.ImageStore`
(no tests here; imported as `from _fake_engine import FakeEngine`).

It behaves like an engine where the tests need it to: look-ups answer None for missing images, streamed calls
(pull, push, load) go through `engine.stream.read_stream` exactly as the docker store's do, so a scripted error chunk
fails them the same way; a build streams classic-builder chunks made from the Dockerfile (a line `RUN false` fails
it with the engine's error chunk) and adds the image with the request's labels. What a test wants to check is
recorded: builds, pulls, pushes, tags, removed images and containers.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from imagebuild.engine.stream import EngineError, read_stream

DEFAULT_HISTORY = [{"Size": 700, "CreatedBy": "/bin/sh -c big"}, {"Size": 300, "CreatedBy": "/bin/sh -c small"},
                   {"Size": 0, "CreatedBy": "LABEL x"}]


class FakeBuildCall:
    """One build call (engine/build.py's BuildCall): chunks() streams, cancel() breaks the stream like a shut socket."""

    def __init__(self, chunks: Callable[[], Iterator[object]], error: Exception | None = None) -> None:
        self._chunks, self._error = chunks, error
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def chunks(self) -> Iterator[object]:
        if self.cancelled:
            raise InterruptedError("cancelled before the build started")
        if self._error is not None:
            raise self._error
        for chunk in self._chunks():
            if self.cancelled:
                raise ConnectionError("Connection broken: the socket was shut")
            yield chunk


class FakeEngine:
    """An in-memory engine image store."""

    def __init__(self, registry: Any = None) -> None:
        self.images_by_id: dict[str, dict[str, Any]] = {}
        self.tags: dict[str, str] = {}  # "repo:tag" -> image ID
        self.lock = threading.Lock()
        self.counter = itertools.count(1)
        self.registry = registry  # a FakeRegistry that pushes land in
        # recorded calls
        self.builds: list[dict[str, Any]] = []
        self.build_calls: list[FakeBuildCall] = []
        self.tag_calls: list[tuple[str, str, str]] = []
        self.removed_images: list[str] = []
        self.removed: list[str] = []  # containers
        self.pulls: list[tuple[str, str, Mapping[str, str] | None]] = []
        self.loaded: list[bytes] = []
        self.copies: list[tuple[str, str]] = []
        # scripts: what the next calls answer
        self.build_streams: list[list[object]] = []  # chunks of the next builds (default: made from the Dockerfile)
        self.build_error: Exception | None = None  # the engine refuses every build call with this
        self.pull_streams: list[list[object]] = []  # chunks of the next pulls (default: one status line)
        self.load_streams: list[list[object]] = []
        self.histories: dict[str, list[dict[str, Any]]] = {}
        self.archives: dict[str, bytes] = {}  # image ID -> the tar copy_out gives back
        self.filesystems: dict[str, bytes] = {}  # image ID -> the tar export gives back
        self.remove_errors: dict[str, Exception | None] = {}  # container ID -> error (None: already gone)
        self.layers_of: Callable[[Mapping[str, str]], list[str]] | None = None  # RootFS layers of built images
        self.root: str | None = None
        self.zstd = True  # pulls_zstd(): a modern engine (False: Docker 20.10)
        self.active = 0
        self.max_active = 0

    # -- images --------------------------------------------------------------------------------------------------
    def add_image(self, tag: str | None, labels: Mapping[str, str], size: int = 1000, *, image_id: str | None = None,
                  repo_digests: tuple[str, ...] = (), **info: Any) -> str:
        iid = image_id or "sha256:" + hashlib.sha256(f"{next(self.counter)}".encode()).hexdigest()
        with self.lock:
            if iid in self.images_by_id:  # one more tag (and digests) for an image already here
                known = self.images_by_id[iid]["RepoDigests"]
                known += [d for d in repo_digests if d not in known]
                if tag:
                    self.tags[tag] = iid
                return iid
            # an image has layers: one of its own unless given (a build's: its parent's and one more, _stream)
            info.setdefault("RootFS", {"Layers": [_layer(iid)]})
            self.images_by_id[iid] = {"Id": iid, "Size": size, "Config": {"Labels": dict(labels)},
                                      "RepoDigests": list(repo_digests), **info}
            if tag:
                self.tags[tag] = iid
        return iid

    def _resolve(self, ref: str) -> str | None:
        iid = self.tags.get(ref, ref)
        if iid in self.images_by_id:
            return iid
        if len(ref) >= 12 and all(c in "0123456789abcdef" for c in ref):  # a short ID, as the engine takes it
            for full in self.images_by_id:
                if full.startswith("sha256:" + ref):
                    return full
        if "@" in ref:  # name[:tag]@digest: an image pulled by that digest (the tag is not looked at)
            name, _, digest = ref.partition("@")
            if ":" in name.rsplit("/", 1)[-1]:
                name = name.rsplit(":", 1)[0]
            for info in self.images_by_id.values():
                if f"{name}@{digest}" in info.get("RepoDigests", []):
                    return str(info["Id"])
        return None

    def inspect(self, ref: str) -> dict[str, Any] | None:
        iid = self._resolve(ref)
        return None if iid is None else self.images_by_id[iid]

    def image_id(self, ref: str) -> str | None:
        return self._resolve(ref)

    def find(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        out = []
        for iid, info in self.images_by_id.items():
            have = info["Config"]["Labels"]
            if all(have.get(k) == v for k, v in labels.items()):
                repo_tags = sorted(t for t, i in self.tags.items() if i == iid)
                out.append({"Id": iid, "Labels": have, "RepoTags": repo_tags or ["<none>:<none>"]})
        return out

    def tag(self, image: str, repository: str, tag: str, *, force: bool = False) -> None:
        self.tag_calls.append((image, repository, tag))
        iid = self._resolve(image)
        if iid is None:
            raise EngineError(f"No such image: {image}", 404)
        self.tags[f"{repository}:{tag}"] = iid

    def remove(self, ref: str, *, noprune: bool = False) -> None:
        self.removed_images.append(ref)
        if ref in self.tags:
            del self.tags[ref]
            return
        self.images_by_id.pop(ref, None)
        for t in [t for t, i in self.tags.items() if i == ref]:
            del self.tags[t]

    def history(self, image: str) -> list[dict[str, Any]]:
        return self.histories.get(image, DEFAULT_HISTORY)

    # -- streamed calls ------------------------------------------------------------------------------------------
    def pull(self, repository: str, tag_or_digest: str, *, auth_config: Mapping[str, str] | None = None,
             on_chunk: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.pulls.append((repository, tag_or_digest, auth_config))
        chunks = self.pull_streams.pop(0) if self.pull_streams else [{"status": f"Pulling from {repository}"}]
        read_stream(chunks, on_chunk)
        digest = tag_or_digest.startswith("sha256:")
        ref = f"{repository}@{tag_or_digest}" if digest else f"{repository}:{tag_or_digest}"
        self.add_image(None if digest else ref, {}, repo_digests=(ref,) if digest else ())

    def load(self, archive: Path) -> list[str]:
        self.loaded.append(archive.read_bytes())
        chunks = self.load_streams.pop(0) if self.load_streams else [{"stream": "Loaded image\n"}]
        lines: list[str] = []
        read_stream(chunks, lambda c: lines.append(str(c.get("stream") or "").strip()))
        return [line for line in lines if line]

    def save(self, image: str) -> Iterator[bytes]:
        """A docker-archive of `image`: its config (labels) and one layer holding a file named after its ID."""
        iid = self.tags.get(image, image)
        info = self.images_by_id[iid]
        layer_buf = io.BytesIO()
        with tarfile.open(fileobj=layer_buf, mode="w") as tar:
            data = iid.encode()
            member = tarfile.TarInfo(f"image-{iid[7:19]}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        layer = layer_buf.getvalue()
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Labels": (info.get("Config") or {}).get("Labels") or {}},
                             "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}},
                            sort_keys=True).encode()
        files = {"config.json": config, "layer.tar": layer,
                 "manifest.json": json.dumps([{"Config": "config.json", "RepoTags": None,
                                               "Layers": ["layer.tar"]}]).encode()}
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for name, data in files.items():
                member = tarfile.TarInfo(name)
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        yield out.getvalue()

    # -- containers made for reading images ----------------------------------------------------------------------
    def copy_out(self, image: str, path: str) -> bytes:
        self.copies.append((image, path))
        return self.archives[image]

    @contextmanager
    def export(self, image: str, *, name: str, labels: Mapping[str, str]) -> Iterator[Iterator[bytes]]:
        yield iter([self.filesystems[image]])

    def remove_container(self, container_id: str) -> bool:
        if container_id in self.remove_errors:
            error = self.remove_errors[container_id]
            if error is None:
                return False
            raise error
        self.removed.append(container_id)
        return True

    def pulls_zstd(self) -> bool:
        return self.zstd

    def root_dir(self) -> str | None:
        return self.root

    # -- builds --------------------------------------------------------------------------------------------------
    def build(self, context: IO[bytes], *, tag: str, dockerfile: str, build_args: Mapping[str, str],
              labels: Mapping[str, str], timeout: int, network: str = "host") -> FakeBuildCall:
        with tarfile.open(fileobj=context) as tar:
            member = tar.extractfile(dockerfile)
            assert member is not None
            text = member.read().decode()
            names = tar.getnames()
        record = {"tag": tag, "buildargs": dict(build_args), "labels": dict(labels), "dockerfile": text,
                  "context": names, "timeout": timeout, "network": network}
        with self.lock:
            self.builds.append(record)
        if self.build_streams:
            chunks = self.build_streams.pop(0)
            call = FakeBuildCall(lambda: iter(chunks), self.build_error)
        else:
            steps = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
            parent = self.inspect(build_args.get("BASE_IMAGE", "")) if build_args.get("BASE_IMAGE") else None
            call = FakeBuildCall(lambda: self._stream(steps, tag, labels, parent), self.build_error)
        self.build_calls.append(call)
        return call

    def _stream(self, steps: list[str], tag: str, labels: Mapping[str, str],
                parent: Mapping[str, Any] | None = None) -> Iterator[dict]:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            for k, step in enumerate(steps, 1):
                yield {"stream": f"Step {k}/{len(steps)} : {step}"}
                yield {"stream": "\n"}
                if step.startswith("RUN"):
                    yield {"stream": f" ---> Running in {k:012x}\n"}
                    yield {"stream": f"output of {step}\n"}
                    if step.strip() == "RUN false":
                        yield {"errorDetail": {"code": 1, "message": "The command '/bin/sh -c false' returned a "
                                                                    "non-zero code: 1"},
                               "error": "The command '/bin/sh -c false' returned a non-zero code: 1"}
                        return
            # the layers a classic build makes: its FROM image's, then one new (a rebuild: another new one)
            below = list(((parent or {}).get("RootFS") or {}).get("Layers") or [])
            layers = self.layers_of(labels) if self.layers_of else [*below, _layer(f"build-{next(self.counter)}")]
            extra = {"RootFS": {"Layers": layers}}
            iid = self.add_image(tag, labels, **extra)
            yield {"aux": {"ID": iid}}
            yield {"stream": f"Successfully built {iid[7:19]}\n"}
        finally:
            with self.lock:
                self.active -= 1

    def info(self) -> dict[str, Any]:
        return {"DockerRootDir": self.root or "/nonexistent"}


def _layer(seed: str) -> str:
    """A diff ID of its own for `seed`."""
    return "sha256:" + hashlib.sha256(f"layer:{seed}".encode()).hexdigest()
