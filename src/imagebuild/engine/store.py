"""The image store: every question the stages ask the engine about images, and every change they make to them.

One protocol (`ImageStore`) and one implementation over the docker SDK (`DockerImageStore`); nothing outside
`engine/` calls the SDK. Look-ups answer None for "no such image" instead of raising, errors come back as
`EngineError` with the engine's own text, and every streamed call (build, pull, load) is read by
`engine.stream`, so an error chunk inside an HTTP-200 answer is never missed. The unit tests fake this protocol
once (tests/unit/_fake_engine.py).

An inspect answer is kept (per engine connection) while nothing could have changed it: no change of this process
since it was read (changes.py: every write below, every docker CLI call that may change images) and at most
ANSWER_SECONDS ago (another process may change the engine too). A run that finds every image up to date asks
about each tag and image once, not once per step that looks (record, disk estimate, up-to-date test, size).

    store = as_store(connect("build"))
    image_id = store.image_id("ml/pytorch:2.9-runtime")      # None: not here
    store.tag(image_id, "ml/pytorch", "latest")
"""

from __future__ import annotations

import copy
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from imagebuild.engine.build import BuildCall, EngineBuild
from imagebuild.engine.changes import changing, stamp
from imagebuild.engine.connect import local_root_dir
from imagebuild.engine.stream import EngineError, read_stream
from imagebuild.engine.unix import LazyClient, NotFound

if TYPE_CHECKING:
    from typing import TypeAlias

    import docker

    EngineClient: TypeAlias = docker.DockerClient  # for annotations outside engine/, which never import docker

Chunk = dict[str, Any]
ImageInfo = dict[str, Any]  # the engine's inspect answer: Id, Size, Created, Config.Labels, RootFS.Layers, ...


@runtime_checkable
class ImageStore(Protocol):
    """What the stages need from an engine's image store."""

    def inspect(self, ref: str) -> ImageInfo | None:
        """The engine's inspect data of a tag, ID or name@digest; None when it has no such image."""
        ...

    def image_id(self, ref: str) -> str | None:
        """The image ID `ref` names here, None when the engine has no such image."""
        ...

    def find(self, labels: Mapping[str, str]) -> list[ImageInfo]:
        """Images carrying every label: entries with Id, Labels, RepoTags (`<none>:<none>` when untagged)."""
        ...

    def tag(self, image: str, repository: str, tag: str, *, force: bool = False) -> None: ...

    def remove(self, ref: str, *, noprune: bool = False) -> None:
        """Untag `ref` (a tag) or remove the image (an ID); EngineError when a container or another tag holds it."""
        ...

    def history(self, image: str) -> list[dict[str, Any]]:
        """The build steps, newest first: CreatedBy, Size, ..."""
        ...

    def pull(self, repository: str, tag_or_digest: str, *, auth_config: Mapping[str, str] | None = None,
             on_chunk: Callable[[Chunk], None] | None = None) -> None:
        """Pull `repository:tag` or `repository@sha256:...`; EngineStreamError with the engine's error text."""
        ...

    def load(self, archive: Path) -> list[str]:
        """Load a docker-archive; the engine's "Loaded image ..." lines, EngineStreamError on an error chunk."""
        ...

    def save(self, image: str) -> Iterator[bytes]:
        """The image as a docker-archive stream (`docker save`); EngineReadError when the engine fails it."""
        ...

    def copy_out(self, image: str, path: str) -> bytes:
        """A tar of `path` in `image` (through a container that is created, never started, and removed)."""
        ...

    def export(self, image: str, *, name: str, labels: Mapping[str, str]) -> Any:
        """Context manager: the image's whole filesystem as a stream of tar bytes (a created, never started
        container, removed on exit)."""
        ...

    def build(self, context: IO[bytes], *, tag: str, dockerfile: str, build_args: Mapping[str, str],
              labels: Mapping[str, str], timeout: int, network: str = "host") -> BuildCall:
        """One classic-builder build (nothing sent until its chunks are read); see engine/build.py."""
        ...

    def remove_container(self, container_id: str) -> bool:
        """Force-remove a container; False when it was already gone."""
        ...

    def root_dir(self) -> str | None:
        """The engine's data-root when it is on this machine, else None."""
        ...

    def pulls_zstd(self) -> bool:
        """Can this engine pull zstd layers? (Docker >= 23; 20.10 cannot.)"""
        ...


ANSWER_SECONDS = 2.0  # the longest an inspect answer is kept, whatever this process did (module doc)


class _Answers:
    """The inspect answers of one engine connection, each under the changes stamp it was read with (changes.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[int, float, ImageInfo | None]] = {}

    def get(self, ref: str, now: int) -> tuple[bool, ImageInfo | None]:
        """(True, a copy of the answer) when one read under stamp `now` is kept, else (False, None)."""
        with self._lock:
            kept = self._kept.get(ref)
        if kept is None or kept[0] != now or time.monotonic() - kept[1] > ANSWER_SECONDS:
            return False, None
        return True, copy.deepcopy(kept[2])

    def put(self, ref: str, read: int, info: ImageInfo | None) -> None:
        """Keep an answer read under stamp `read` (taken before asking: a change that began meanwhile voids it)."""
        with self._lock:
            self._kept[ref] = (read, time.monotonic(), copy.deepcopy(info))


_answers: weakref.WeakKeyDictionary[Any, _Answers] = weakref.WeakKeyDictionary()
_answers_lock = threading.Lock()


def _answers_of(client: Any) -> _Answers | None:
    """The kept answers of `client`'s engine connection (shared by every store on it); None: not kept."""
    with _answers_lock:
        try:
            found = _answers.get(client)
            if found is None:
                found = _answers[client] = _Answers()
        except TypeError:  # a client that cannot be weakly referenced: nothing kept
            return None
        return found


def _engine_error(exc: Exception) -> EngineError:
    explanation = getattr(exc, "explanation", None)
    return EngineError(str(explanation or exc), getattr(exc, "status_code", None))


class DockerImageStore:
    """The image store of the engine a `docker.DockerClient` talks to (its low-level API)."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    @property
    def _api(self) -> Any:
        return self.client.api

    def inspect(self, ref: str) -> ImageInfo | None:
        answers, read = _answers_of(self.client), stamp()
        if answers is not None and read is not None:
            found, kept = answers.get(ref, read)
            if found:
                return kept
        info = self._inspect(ref)
        if answers is not None and read is not None:
            answers.put(ref, read, info)
        return info

    def _inspect(self, ref: str) -> ImageInfo | None:
        """The engine's inspect answer now (None: no such image)."""
        import docker

        try:
            info: ImageInfo = self._api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise _engine_error(exc) from None
        return info

    def image_id(self, ref: str) -> str | None:
        info = self.inspect(ref)
        return None if info is None else str(info["Id"])

    def find(self, labels: Mapping[str, str]) -> list[ImageInfo]:
        found: list[ImageInfo] = self._call(self._api.images, filters={"label": [f"{k}={v}" for k, v in labels.items()]})
        return found

    def tag(self, image: str, repository: str, tag: str, *, force: bool = False) -> None:
        with changing():
            self._call(self._api.tag, image, repository, tag, force=force)

    def remove(self, ref: str, *, noprune: bool = False) -> None:
        with changing():
            self._call(self._api.remove_image, ref, noprune=noprune)

    def history(self, image: str) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = self._call(self._api.history, image) or []
        return steps

    def pull(self, repository: str, tag_or_digest: str, *, auth_config: Mapping[str, str] | None = None,
             on_chunk: Callable[[Chunk], None] | None = None) -> None:
        import docker

        kw: dict[str, Any] = {"tag": tag_or_digest, "stream": True, "decode": True}
        if auth_config is not None:
            kw["auth_config"] = dict(auth_config)
        try:
            with changing():
                read_stream(self._api.pull(repository, **kw), on_chunk)
        except docker.errors.APIError as exc:
            raise _engine_error(exc) from None

    def load(self, archive: Path) -> list[str]:
        import docker

        lines: list[str] = []

        def keep(chunk: Chunk) -> None:
            text = str(chunk.get("stream") or "").strip()
            if text:
                lines.append(text)

        try:
            with open(archive, "rb") as fh, changing():
                read_stream(self._api.load_image(fh, quiet=True), keep)
        except docker.errors.APIError as exc:
            raise _engine_error(exc) from None
        return lines

    def save(self, image: str) -> Iterator[bytes]:
        from imagebuild.engine.rootfs import saved_image

        return saved_image(self.client, image)

    def copy_out(self, image: str, path: str) -> bytes:
        with changing():  # a container, not an image; counted all the same: every engine write is (changes.py)
            return self._copy_out(image, path)

    def _copy_out(self, image: str, path: str) -> bytes:
        container = self._call(self._api.create_container, image, command=["/none"])  # a scratch image runs nothing
        try:
            stream, _ = self._call(self._api.get_archive, container["Id"], path)
            return b"".join(stream)
        finally:
            self._call(self._api.remove_container, container["Id"], force=True)

    @contextmanager
    def export(self, image: str, *, name: str, labels: Mapping[str, str]) -> Iterator[Iterator[bytes]]:
        with changing(), self._export(image, name=name, labels=labels) as chunks:
            yield chunks

    @contextmanager
    def _export(self, image: str, *, name: str, labels: Mapping[str, str]) -> Iterator[Iterator[bytes]]:
        import docker
        import requests

        # A command is needed to create a container from an image without CMD/ENTRYPOINT (bootstrapped rootfs); it
        # never runs, so it need not exist in the image.
        try:
            container = self._api.create_container(image, command=["/imagebuild-never-runs"], network_disabled=True,
                                                   name=name, labels=dict(labels))
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise _engine_error(exc) from None
        cid = container["Id"]

        def chunks() -> Iterator[bytes]:
            try:
                yield from self._api.export(cid, chunk_size=1 << 20)
            except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                raise _engine_error(exc) from None

        try:
            yield chunks()
        finally:
            try:
                self._api.remove_container(cid, force=True, v=True)
            except Exception:  # noqa: BLE001 - already gone; nothing else to do about a failed cleanup here
                pass

    def build(self, context: IO[bytes], *, tag: str, dockerfile: str, build_args: Mapping[str, str],
              labels: Mapping[str, str], timeout: int, network: str = "host") -> EngineBuild:
        return EngineBuild(self._api, fileobj=context, custom_context=True, decode=True, rm=True, forcerm=True,
                           pull=False, network_mode=network, buildargs=dict(build_args), labels=dict(labels),
                           tag=tag, timeout=timeout, dockerfile=dockerfile)

    def remove_container(self, container_id: str) -> bool:
        import docker

        try:
            with changing():
                self._api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            raise _engine_error(exc) from None
        return True

    def root_dir(self) -> str | None:
        return local_root_dir(self.client)

    def pulls_zstd(self) -> bool:
        version = str(self._call(self._api.version).get("Version") or "0")
        try:
            return int(version.split(".", 1)[0]) >= 23
        except ValueError:
            return False

    @staticmethod
    def _call(method: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        import docker

        try:
            return method(*args, **kw)
        except docker.errors.APIError as exc:
            raise _engine_error(exc) from None


class SocketImageStore(DockerImageStore):
    """The store of a `connect(purpose, lazy=True)` client (unix.py): its questions (inspect, history, images by
    label, the engine's version) and an alias tag over the engine's socket, without the docker SDK; every other
    call through the SDK client, made then."""

    def __init__(self, client: LazyClient) -> None:
        super().__init__(cast("docker.DockerClient", client))
        self.engine = client.engine

    def _inspect(self, ref: str) -> ImageInfo | None:
        if not ref:
            raise EngineError("Resource ID was not provided")  # the SDK's refusal of an empty reference
        try:
            info: ImageInfo = self.engine.get("/images/{}/json", ref)
        except NotFound as exc:
            if not exc.image:
                raise
            return None
        return info

    def find(self, labels: Mapping[str, str]) -> list[ImageInfo]:
        filters = json.dumps({"label": [f"{k}={v}" for k, v in labels.items()]})
        found: list[ImageInfo] = self.engine.get("/images/json", params={"only_ids": 0, "all": 0, "filters": filters})
        return found

    def tag(self, image: str, repository: str, tag: str, *, force: bool = False) -> None:
        with changing():
            self.engine.post("/images/{}/tag", image, params={"tag": tag, "repo": repository, "force": int(force)})

    def history(self, image: str) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = self.engine.get("/images/{}/history", image) or []
        return steps

    def pulls_zstd(self) -> bool:
        try:
            return int((self.engine.engine_version or "0").split(".", 1)[0]) >= 23
        except ValueError:
            return False


def as_store(engine: ImageStore | EngineClient) -> ImageStore:
    """`engine` itself when it is a store already, else the store of the engine the docker client talks to."""
    if isinstance(engine, LazyClient):  # first: a Protocol's isinstance probes attributes
        return SocketImageStore(engine)
    if isinstance(engine, ImageStore):
        return engine
    return DockerImageStore(engine)
