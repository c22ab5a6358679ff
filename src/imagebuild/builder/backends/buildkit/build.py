"""The BuildKit backend: one `docker buildx build` process per image, driven through the CLI.

The docker SDK cannot drive BuildKit (it needs buildx's gRPC session: secrets, named contexts, cache export), so this
backend runs buildx (through engine/cli.py, the engine's CLI door) against the engine DOCKER_HOST names (the docker driver: the image lands in that
engine's store) or any buildx builder the user names (`--builder`: docker-container, remote, kubernetes; the image is
loaded into the engine). It honours the seam's contract (backend.py): `events()` never raises, `cancel()` stops the
process from any thread, and the outcome is the engine's image ID or the failing step with its tail.

The argv is built in argv.py, the rawjson progress is parsed in progress.py; what the builder can do is checked once
before anything builds (checks.py).
"""

from __future__ import annotations

import codecs
import json
import os
import selectors
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from imagebuild.builder.backend import BuildEvent, BuildOutcome, BuildRequest
from imagebuild.builder.backends.buildkit import envimage
from imagebuild.builder.backends.buildkit.argv import BuildxCall, buildx_argv, secret_env
from imagebuild.builder.backends.buildkit.progress import NAME_MAX, RawJsonProgress
from imagebuild.builder.context import tar_context
from imagebuild.engine import cli, held
from imagebuild.models import platform_to_ask
from imagebuild.oci import Reference
from imagebuild.phases import Phase
from imagebuild.render.tiers import ENV_KEY_STAGE, ENV_STAGE

# build arguments that carry credentials: sent as build secrets; the buildkit templates read /run/secrets/<id>
SECRET_BUILD_ARGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
PIN_REPOSITORY = "imagebuild-pin"  # a parent's named context: imagebuild-pin:<hex of its image ID>


class BuildxBackend:
    """Builds through `docker buildx build`; `builder` None is the current builder (the engine's docker driver)."""

    def __init__(self, builder: str | None = None, docker_driver: bool = True, cache_repository: str | None = None,
                 containerd_store: bool = False, platforms: tuple[str, ...] = ()) -> None:
        self.builder, self.docker_driver, self.cache_repository = builder, docker_driver, cache_repository
        # what `docker buildx inspect` lists for the builder's nodes (the docker driver's include what QEMU runs)
        self.platforms = platforms
        # the docker driver on the containerd image store: export with rewritten dates into the layout kept beside
        # the engine (engine/held.py), then load what the engine lacks
        self.via_layout = docker_driver and containerd_store

    def cache_flags(self, tag: str, part: str = "image", split: bool = False) -> tuple[str, ...]:
        """A registry cache per image (`<cache repository>:<the image's tag>`, every stage: mode=max), imported and
        exported, so a fresh runner rebuilding a changed image reuses each unchanged stage. Plain HTTP for a
        loopback registry, as the engine itself allows. A runtime built with its env image (`split`, envimage.py)
        has a second one, `<tag>-env`, of the env image's build: `part` "env" exports that one, "key" (the env-key
        files) exports none; each imports both."""
        if not self.cache_repository:
            return ()
        from imagebuild.oci import Reference

        repo = Reference.parse(self.cache_repository)
        ref = f"{repo.name}:{Reference.parse(tag).tag or 'latest'}"
        insecure = ",registry.insecure=true" if repo.registry.split(":")[0] in ("localhost", "127.0.0.1") else ""
        refs = [ref, f"{ref}-env"] if split else [ref]
        own = {"image": ref, "env": f"{ref}-env", "key": None}[part]
        flags: list[str] = []
        for r in sorted(refs, key=lambda r: r != own):
            flags += ["--cache-from", f"type=registry,ref={r}{insecure}"]
        if own is not None:
            flags += ["--cache-to", f"type=registry,ref={own},mode=max,ignore-error=true{insecure}"]
        return tuple(flags)

    def start(self, request: BuildRequest) -> BuildxBuild:
        return BuildxBuild(self, request)

    def cleanup(self, warn: Callable[[str], None]) -> list[str]:
        """BuildKit leaves no intermediate containers; a cancelled solve is discarded by the builder itself."""
        return []

    def parent_ref(self, image_id: str) -> str:
        """A tag naming exactly `image_id` in the engine's store: `imagebuild-pin:<hex of the ID>`, made here.

        Measured on dockerd 26.1 (containerd image store): a named context `docker-image://tag@sha256:<id>` finds a
        `docker import`ed image locally but looks a `docker load`ed one (our bootstrap bases) up on Docker Hub; a
        plain tag is always found locally. A tag spelled from the ID itself is as exact as the digest."""
        pin = f"{PIN_REPOSITORY}:{image_id.removeprefix('sha256:')}"
        tagged = cli.tag(image_id, pin)
        if not tagged.ok:
            raise LookupError(f"the parent image {image_id[:19]} is not in the engine: {tagged.reason}")
        return pin

    def image_id(self, tag: str) -> str | None:
        """The engine's own ID of the built image (what the SDK and the record use; with the containerd image store
        the manifest digest, not the config digest buildx's --iidfile gives)."""
        return cli.image_id(tag)


class BuildxBuild:
    """One buildx process: its progress, its outcome; `cancel()` terminates it."""

    def __init__(self, backend: BuildxBackend, request: BuildRequest) -> None:
        self.backend, self.request = backend, request
        self.progress = RawJsonProgress(log=request.log)
        self._lock = threading.Lock()
        self._process: cli.Process | None = None
        self._cancelled = False
        self._image_id: str | None = None
        # each buildx process of this image (envimage.py: the env-key files, the env image, the image), its progress
        self._solves: list[tuple[str, RawJsonProgress]] = []
        self._extra: list[tuple[int, Phase]] = []  # phases seen outside BuildKit, after solve n (loads, the env)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()  # buildx cancels the solve on SIGTERM

    def events(self) -> Iterator[BuildEvent]:
        error_sent = False
        with tempfile.TemporaryDirectory(prefix="imagebuild-buildx-") as tmp:
            try:
                for ev in self._run(Path(tmp)):
                    error_sent = error_sent or ev.kind == "error"
                    yield ev
            except Exception as exc:  # the seam's contract: a failed build is an outcome, never an exception
                self.progress.fail("interrupted" if self._cancelled else f"{type(exc).__name__}: {exc}")
        if self.progress.error is not None and not error_sent:
            yield BuildEvent("error", self.progress.failure_summary())

    def _run(self, tmp: Path) -> Iterator[BuildEvent]:
        req = self.request
        if self._cancelled:
            self.progress.fail("interrupted")
            return
        context_dir = tmp / "context"
        # the same context the classic backend sends (Dockerfile, context files, host folders), as a folder for buildx
        context = tar_context(req.dockerfile, dict(req.context_files), dict(req.context_dirs))
        try:
            with tarfile.open(fileobj=context, mode="r|") as tar:
                tar.extractall(context_dir, filter="data")
        finally:
            context.close()
        args = req.all_build_args()
        base = req.parents.get("BASE_IMAGE", "")
        call = BuildxCall(
            context_dir=context_dir, dockerfile="Dockerfile", tag=req.tag, build_args=args,
            labels=req.labels, secrets=SECRET_BUILD_ARGS,
            base_ref=self.backend.parent_ref(base) if base.startswith("sha256:") else None,
            builder=self.backend.builder, docker_driver=self.backend.docker_driver,
            platform=platform_to_ask(req.platform))
        if not self.backend.via_layout:  # the builder stores or loads the image itself
            call = replace(call, extra_flags=self.backend.cache_flags(req.tag))
            if (yield from self._solve(call, "image")):
                yield from self._found()
            return
        split = envimage.splits(req.dockerfile)
        call = replace(call, extra_flags=self.backend.cache_flags(req.tag, split=split))
        with held.exporting() as layout:  # the OCI layout beside the engine (engine/held.py)
            call = replace(call, layout=layout)
            env_layers: list[str] | None = None
            if split:
                env_ref = yield from self._env_image(call, tmp)
                if env_ref is None:
                    return
                env_layers = cli.diff_ids(env_ref)
                call = replace(call, env_ref=env_ref, env_by_context=env_layers is None)
            digest = yield from self._export(call, "image", tmp, env_layers)
            if digest is not None:
                yield from self._found(exported=digest)
        held.prune(keep_path=held.find(self._image_id) if self._image_id else None)  # never the image just built

    def _found(self, exported: str | None = None) -> Iterator[BuildEvent]:
        """The engine's ID of the built image; an exported image (the layout's manifest `exported`) is kept in the
        layout under that ID (engine/held.py) when the engine holds exactly that manifest."""
        if self.progress.error is not None:
            return
        self._image_id = self.backend.image_id(self.request.tag)
        if self._image_id is None:
            self.progress.fail(f"buildx reported success but the engine has no image {self.request.tag}")
            return
        if exported is not None and exported == self._image_id:  # what a push of this image sends
            held.keep(self._image_id)
        yield BuildEvent("image", self._image_id)

    def _env_image(self, call: BuildxCall, tmp: Path) -> Generator[BuildEvent, None, str | None]:
        """The runtime's env stage as an image in the engine (envimage.py): its key from the env-key stage's files,
        then the engine's image of that key, else built, loaded and tagged by it. Its tag, or None when a step failed
        (the progress says which)."""
        req = self.request
        started = time.monotonic()
        key_dir = tmp / "env-key"
        key_call = replace(call, target=ENV_KEY_STAGE, local_dest=key_dir, layout=None, tag="", labels={},
                           extra_flags=self.backend.cache_flags(req.tag, "key", split=True))
        if not (yield from self._solve(key_call, "env-key")):
            return None
        key = envimage.env_key(req.dockerfile, envimage.read_key_files(key_dir), call.build_args, call.secrets,
                               parent_id=req.parents.get("BASE_IMAGE", ""), platform=req.platform,
                               context_files=req.context_files, context_dirs=req.context_dirs)
        ref = envimage.env_tag(key)
        if self.backend.image_id(ref) is not None:
            self._extra.append((len(self._solves), Phase(
                "env", f"the env image {envimage.short_tag(ref)}: the engine's, taken again by its key",
                time.monotonic() - started, cached=True)))
            yield BuildEvent("step", "env image: taken again by its key")
            return ref
        env_call = replace(call, target=ENV_STAGE, tag=ref, labels={},
                           extra_flags=self.backend.cache_flags(req.tag, "env", split=True))
        if (yield from self._export(env_call, "env image", tmp)) is None:
            return None
        if self.backend.image_id(ref) is None:
            self.progress.fail(f"buildx reported success but the engine has no env image {ref}")
            return None
        self._extra.append((len(self._solves), Phase(
            "env", f"the env image {envimage.short_tag(ref)}: built (the engine had none of its key)",
            time.monotonic() - started, cached=False)))
        return ref

    def _export(self, call: BuildxCall, label: str, tmp: Path, env_layers: list[str] | None = None,
                before: set[str] | None = None) -> Generator[BuildEvent, None, str | None]:
        """One image exported into the layout (BuildKit writes the blobs it lacks) and loaded into the engine: the
        blobs the layout held before come from the engine's own store. The runtime standing on its env image gets the
        manifest one build writes (envimage.annotate_like_one_build), else it is exported again with the env image
        as a named context. The loaded manifest's digest, or None when a step failed (the progress says which).
        `before`: the layout's blobs before the first export of this image (an export again writes, but never
        loaded, what the first one wrote)."""
        layout, metadata = call.layout, tmp / "metadata.json"
        assert layout is not None
        before = held.layout_blobs(layout) if before is None else before
        metadata.unlink(missing_ok=True)
        call = replace(call, metadata=metadata)
        if not (yield from self._solve(call, label)):
            return None
        descriptor = _exported(metadata)
        if descriptor is None:
            self.progress.fail(f"buildx exported the {label} but its --metadata-file names no image manifest")
            return None
        if env_layers is not None and not call.env_by_context:
            started = time.monotonic()
            try:
                digest = envimage.annotate_like_one_build(layout, str(descriptor["digest"]), env_layers)
            except envimage.ManifestNotAsExpected as exc:  # built again as one build would: every layer re-dated
                yield BuildEvent("line", f"imagebuild: {exc}; exporting the image again with the env image re-dated")
                return (yield from self._export(replace(call, env_by_context=True), "image (again)", tmp,
                                                before=before))
            size = held.blob_path(layout, digest).stat().st_size
            descriptor = {**descriptor, "digest": digest, "size": size}
            self._extra.append((len(self._solves), Phase(
                "export", "the env image's layers marked re-dated, as one build marks them",
                time.monotonic() - started)))
        yield from self._load(layout, descriptor, before, tmp, call.tag,
                              "the image" if call.target is None else "the env image")
        return None if self.progress.error is not None else str(descriptor["digest"])

    def _solve(self, call: BuildxCall, label: str) -> Generator[BuildEvent, None, bool]:
        """One buildx process, its progress its own (the first one's is the build's first progress)."""
        if self._solves:
            self.progress = RawJsonProgress(log=self.request.log)
        self._solves.append((label, self.progress))
        with self._lock:
            if self._cancelled:
                self.progress.fail("interrupted")
                return False
            self._process = cli.start(buildx_argv(call), env=secret_env(call.build_args, SECRET_BUILD_ARGS))
        process = self._process
        try:
            yield from self._stream(process)
        finally:
            if process.poll() is None:
                process.kill()
            returncode = process.wait()
        if self._cancelled:
            self.progress.fail("interrupted")
        yield from self.progress.finish(returncode)
        return self.progress.error is None

    def _load(self, layout: Path, descriptor: dict[str, Any], leave_out: set[str], tmp: Path, tag: str,
              what: str) -> Iterator[BuildEvent]:
        """The exported image into the engine's store: an archive of its manifest, config and the blobs that were not
        in the layout before its export (the engine holds those: it loaded them), named by the request's tag. An
        engine that lacks one of them (another engine's layout, an image removed since) refuses that load and
        changes nothing; then the whole image is loaded."""
        image = what == "the image"
        # a phase: no step number (progress.py)
        yield BuildEvent("step", "loading into the engine" if image else f"loading {what} into the engine")
        start = time.monotonic()
        name = str(Reference.parse(tag).normalized())
        archive = tmp / "load.tar"
        leaving = leave_out
        try:
            while True:
                held.load_archive(layout, descriptor, name, archive, leave_out=leaving)
                loaded = cli.load(str(archive), timeout=self.request.timeout)
                if loaded.ok or not leaving:
                    break
                yield BuildEvent("line", f"imagebuild: the engine lacks a blob the kept layout holds "
                                         f"({loaded.reason}); loading all of {what}")
                leaving = set()
        except (held.BlobProblem, OSError) as exc:
            self.progress.fail(f"the exported {what.removeprefix('the ')} cannot be loaded: {exc}")
            return
        finally:
            archive.unlink(missing_ok=True)
        name = "loading the exported archive into the engine" if image else f"loading {what}'s archive into the engine"
        self._extra.append((len(self._solves), Phase("export", name, time.monotonic() - start)))
        if not loaded.ok:
            self.progress.fail(f"docker image load of the exported {what.removeprefix('the ')} failed: "
                               f"{loaded.reason}")

    def _stream(self, process: cli.Process) -> Iterator[BuildEvent]:
        """Read stderr until EOF; `request.timeout` seconds without a byte count as a lost build."""
        assert process.stderr is not None
        fd = process.stderr.fileno()
        os.set_blocking(fd, False)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a chunk may end inside a character
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            last = time.monotonic()
            while True:
                if not sel.select(timeout=1.0):
                    if time.monotonic() - last > self.request.timeout:
                        self.progress.fail(f"no output from buildx for {self.request.timeout} s: build lost")
                        return
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return
                last = time.monotonic()
                yield from self.progress.feed(decoder.decode(chunk))

    def phases(self) -> tuple[Phase, ...]:
        """BuildKit's timed phases of each buildx process (progress.py; the env image's and its key's named so),
        each followed by what came after it outside BuildKit: an archive's load into the engine, the env image."""
        out: list[Phase] = []
        for n, (label, progress) in enumerate(self._solves or [("image", self.progress)], start=1):
            for phase in progress.timed_phases():
                out.append(phase if label == "image" else replace(phase, name=f"{label}: {phase.name}"[:NAME_MAX]))
            out += [phase for after, phase in self._extra if after == n]
        return tuple(out)

    def outcome(self) -> BuildOutcome:
        if self.progress.failed or self._image_id is None:
            return BuildOutcome(image_id=None, error=self.progress.failure_summary() or "the build did not run",
                                tail=self.progress.tail_text(), phases=self.phases())
        return BuildOutcome(image_id=self._image_id, phases=self.phases())


def _exported(metadata: Path) -> dict[str, Any] | None:
    """The image manifest's descriptor buildx's --metadata-file gives for an export (`containerimage.descriptor`), or
    None when there is none that names one manifest by a sha256 digest and size."""
    try:
        doc = json.loads(metadata.read_text())
    except (OSError, ValueError):
        return None
    desc = doc.get("containerimage.descriptor") if isinstance(doc, dict) else None
    if not isinstance(desc, dict) or not isinstance(desc.get("digest"), str) or not isinstance(desc.get("size"), int) \
            or not str(desc["digest"]).startswith("sha256:") or not isinstance(desc.get("mediaType"), str):
        return None
    return desc
