"""The registry as the cache of a fresh CI runner: which planned images a registry already holds, exactly.

An image is *up to date in R* only when everything agrees, checked through the registry API (no pulls):
- R serves a manifest for the planned tag (an index: its linux/<this machine's arch> entry);
- its config blob hashes to the manifest's config digest (a config that does not match is not trusted);
- the config carries every deterministic label of the plan, the inputs hash included (a manifest without the
  label, or with other versions, is not up to date), for this machine's OS/architecture;
- a child's layers (its config's `rootfs.diff_ids`) begin with exactly the layers of the image its parent resolves
  to in this run (the parent's config in R, or the parent's local image): a child is never reused on a parent it was
  not built on (uptodate.stands_on, the local rule).
Any registry error during the look-up (unreachable, refused credentials, 5xx mid-way) raises RegistryUnavailable
and the caller builds locally: a partial answer is never used.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.builder.uptodate import INPUTS_LABEL, stands_on
from imagebuild.engine.store import ImageStore
from imagebuild.models import ImagePlan, ImageResult
from imagebuild.oci import Reference, ReferenceSyntaxError
from imagebuild.oci.answers import INDEX_TYPES, config_diff_ids
from imagebuild.oci.registry import RegistryClient, RegistryError
from imagebuild.oci.skopeo import auth_from_sdk, fetch_archive
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState


class RegistryUnavailable(Exception):
    pass


@dataclass(frozen=True)
class RemoteImage:
    tag: str  # the planned tag
    ref: str  # name@digest: what a pull by digest fetches
    digest: str  # manifest digest
    image_id: str  # config digest = the image ID an engine gives it
    registry: str  # the registry prefix, for messages
    compressed: int  # sum of the layer sizes in the manifest: what a pull would download
    auth_config: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # for the engine's pull
    zstd: bool = False  # some layer is zstd-compressed: Docker < 23 pulls it through skopeo (pull_by_digest)
    plain_http: bool = False  # the registry answered over http (skopeo must be told)
    diff_ids: tuple[str, ...] = ()  # its config's rootfs.diff_ids: what a child's layers must begin with


def machine_arch() -> str:
    m = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(m, m)


def _pick(rc: RegistryClient, repo: str, digest: str, doc: dict[str, Any], arch: str) -> tuple[str, dict[str, Any]] | None:
    if doc.get("mediaType") in INDEX_TYPES or "manifests" in doc:
        for entry in doc.get("manifests") or []:
            p = entry.get("platform") or {}
            if p.get("os") == "linux" and p.get("architecture") == arch:
                got = rc.manifest(repo, entry["digest"])
                return got
        return None
    return digest, doc


def check_config(img: ImagePlan, config: dict[str, Any], arch: str, parent_layers: list[str] | None) -> str | None:
    """Why this config is not `img` as planned (None: it is). `parent_layers`: the diff IDs of the image its parent
    resolves to in this run (None: a base image, no parent to stand on)."""
    labels = (config.get("config") or {}).get("Labels") or {}
    if labels.get(INPUTS_LABEL) != img.inputs_hash:
        have = labels.get(INPUTS_LABEL)
        return f"inputs hash {have[7:19] if have else 'label missing'} (planned {img.inputs_hash[7:19]})"
    if config.get("os") != "linux" or config.get("architecture") != arch:
        return f"platform {config.get('os')}/{config.get('architecture')} (this machine: linux/{arch})"
    for key, value in img.labels.items():
        if labels.get(key) != value:
            return f"label {key}={labels.get(key)!r} (planned {value!r})"
    if parent_layers is not None and not stands_on(config_diff_ids(config), parent_layers):
        return "its layers do not begin with the layers of its parent here"
    return None


def find_in_registry(images: list[ImagePlan], resolve_auth: Callable[..., Any], log: Callable[[str], None],
                     local_layers: Callable[[ImagePlan], list[str] | None] | None = None,
                     make_client: Callable[..., RegistryClient] | None = None,
                     arch: str | None = None, pulls_zstd: bool = True) -> dict[str, RemoteImage]:
    """planned tag -> RemoteImage for every image (parents first) the registry holds exactly as planned.
    `pulls_zstd` False (Docker 20.10, whose pull cannot inflate zstd layers): an image with zstd layers is marked so
    that pull_by_digest fetches it through skopeo (decompressed into a docker-archive the engine loads: the same
    config bytes, so the same image ID) when a child must be built on it."""
    arch = arch or machine_arch()
    make_client = make_client or (lambda auth: RegistryClient(auth, retries=0, timeout=15.0))
    clients: dict[str, RegistryClient] = {}
    auths: dict[str, dict[str, Any] | None] = {}
    found: dict[str, RemoteImage] = {}
    by_tag = {i.tag: i for i in images}
    for img in images:
        try:
            ref = Reference.parse(img.tag)
        except ReferenceSyntaxError:
            continue
        if ref.domain is None or not ref.tag:
            continue  # a local-only tag: no registry to ask
        registry = ref.registry
        prefix = ref.name.rsplit("/", 1)[0]
        try:
            if registry not in clients:
                auth = resolve_auth(registry)
                auths[registry] = auth.sdk_auth_config()
                clients[registry] = make_client(auth)
                clients[registry].check_auth(ref.repository, actions="pull")
            rc = clients[registry]
            got = rc.manifest(ref.repository, ref.tag)
            if got is None:
                log(f"registry cache: {img.tag}: not in {prefix}")
                continue
            picked = _pick(rc, ref.repository, got[0], got[1], arch)
            if picked is None:
                log(f"registry cache: {img.tag}: no linux/{arch} image in {prefix}")
                continue
            digest, manifest = picked
            cfg_digest = (manifest.get("config") or {}).get("digest")
            if not cfg_digest:
                log(f"registry cache: {img.tag}: manifest without a config in {prefix}")
                continue
            config = json.loads(rc.blob(ref.repository, cfg_digest))
        except RegistryError as exc:  # its message names the registry already
            text = str(exc)
            raise RegistryUnavailable(text if text.startswith(registry) else f"{registry}: {text}") from None
        except ValueError as exc:
            raise RegistryUnavailable(f"{registry}: {img.tag}: config is not JSON ({exc})") from None
        parent_layers = None
        if img.parent is not None:
            parent = found.get(img.parent)
            parent_img = by_tag.get(img.parent)
            parent_layers = (list(parent.diff_ids) if parent else
                             (local_layers(parent_img) if local_layers and parent_img else None))
            if not parent_layers:
                log(f"registry cache: {img.tag}: its parent is neither in {prefix} nor built here yet: rebuilt")
                continue
        why = check_config(img, config, arch, parent_layers)
        if why:
            log(f"registry cache: {img.tag}: {prefix} holds another image ({why}): rebuilt")
            continue
        has_zstd = any(str(layer.get("mediaType") or "").endswith("+zstd") for layer in manifest.get("layers") or [])
        size = sum(int(layer.get("size") or 0) for layer in manifest.get("layers") or [])
        found[img.tag] = RemoteImage(img.tag, f"{ref.name}@{digest}", digest, cfg_digest, prefix, size,
                                    auths.get(registry), zstd=has_zstd and not pulls_zstd,
                                    plain_http=rc.scheme() == "http", diff_ids=tuple(config_diff_ids(config)))
    return found


def use_remote(run: RunState, img: ImagePlan, res: ImageResult) -> bool:
    """An image up to date in the registry: nothing built. Pulled by digest only when a child of this run must be
    built on it (or the engine already has it). Fills `res`; False when `img` is not up to date in the registry."""
    remote: RemoteImage | None = (run.options.remote or {}).get(img.tag)
    if remote is None:
        return False
    ref = Reference.parse(img.tag)
    # the status is set last: the scheduler starts children as soon as it reads "up-to-date"
    have = run.store.image_id(remote.image_id) is not None
    needed = any(c.parent == img.tag and c.tag not in run.options.remote for c in run.images)
    if not have and needed:
        run.progress.set(img.tag, "pulling", f"{remote.ref} ({remote.compressed} bytes compressed)")
        pulled = pull_by_digest(run.store, remote)
        if pulled != remote.image_id:
            raise RegistryError(f"{remote.ref}: pulled image {pulled} is not the config {remote.image_id}")
        res.source = f"pulled {remote.registry}"
        have = True
    elif have:
        res.source = "engine"
    else:
        res.source = f"registry {remote.registry}"
    if have:
        run.store.tag(remote.image_id, ref.name, ref.tag or "latest", force=True)
    res.push = {"status": "present", "digest": remote.digest, "registry": ref.registry, "tags": [img.tag]}
    res.image_id = remote.image_id
    res.status = "up-to-date"
    run.progress.set(img.tag, "up-to-date")
    return True


def pull_by_digest(store: ImageStore, remote: RemoteImage) -> str:
    """Pull `remote` by digest with the registry's credentials; errors inside the HTTP-200 stream fail it. zstd
    layers on an engine that cannot inflate them (`remote.zstd`): skopeo copies the image into a docker-archive
    (layers decompressed, config bytes as pushed) and the engine loads it."""
    name, _, digest = remote.ref.partition("@")
    try:
        if remote.zstd:
            fetch_into_engine(store, remote.ref, remote.auth_config, plain_http=remote.plain_http)
        else:
            store.pull(name, digest, auth_config=remote.auth_config)
    except Exception as exc:  # EngineError (the stream's error text, a refused call), CopyError, connection errors
        raise RegistryError(f"pulling {remote.ref} failed: {redact(str(exc))}") from None
    # a loaded archive carries no repo digest: the config digest is the ID the engine must now have
    pulled = store.image_id(remote.image_id if remote.zstd else remote.ref)
    if pulled is None:
        raise RegistryError(f"pulling {remote.ref} finished but the engine does not have it")
    return pulled


def fetch_into_engine(store: ImageStore, ref: str, auth_config: dict[str, Any] | None, *, plain_http: bool) -> None:
    """`ref` through skopeo into a docker-archive in a private temporary folder, loaded into the engine, the folder
    removed (credentials in an auth file inside it, never on a command line)."""
    work = Path(tempfile.mkdtemp(prefix="imagebuild-pull-", dir=os.environ.get("IMAGEBUILD_PUSH_TMP")))
    try:  # mkdtemp made it 0700
        registry = Reference.parse(ref).registry
        store.load(fetch_archive(ref, auth_from_sdk(registry, auth_config), work, plain_http=plain_http))
    finally:
        shutil.rmtree(work, ignore_errors=True)
