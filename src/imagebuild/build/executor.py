"""Build a Plan through the docker SDK's low-level build API, in dependency order.

- Each parent is built once; children get build arg `BASE_IMAGE=<parent image ID>` (never a moving tag); the base
  flavor gets the bootstrap image ID (or the pulled registry base's ID).
- Independent images build in parallel (`jobs`).
- An image is "up to date" when an image carrying `io.imagebuild.inputs-hash == plan.inputs_hash` (and built on the
  same base image ID, label `io.imagebuild.base-id`) exists: its tag is (re)pointed at it, nothing is built.
- Every `error`/`errorDetail` chunk fails that image; the failing step, the last lines and the log path are kept.
- Interrupts (SIGINT/SIGTERM): the build connections are shut (the engine cancels the build), the build's
  intermediate containers are removed, `KeyboardInterrupt` propagates (exit 130). A rerun continues from the cache.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import fnmatch
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from imagebuild.build import bootstrap as bootstrap_mod
from imagebuild.build.context import build_context
from imagebuild.build.engine import local_root_dir
from imagebuild.build.progress import Progress
from imagebuild.build.pull import ensure_pulled
from imagebuild.build.stream import BuildStream, open_log
from imagebuild.errors import ImagebuildError, UsageError
from imagebuild.models import ImagePlan, ImageResult, Plan
from imagebuild.secrets import redact, register_secret

INPUTS_LABEL = "io.imagebuild.inputs-hash"
BASE_LABEL = "io.imagebuild.base-id"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")
GB = 1000**3
# final-image growth per flavor, bytes (what the flavor adds on top of its parent)
SIZE_ESTIMATE = {
    ("base", "cpu"): int(0.4 * GB),
    ("base", "cuda"): int(0.4 * GB),
    ("runtime", "cpu"): int(1.5 * GB),
    ("runtime", "cuda"): int(7.0 * GB),
    ("dev", "cpu"): int(1.0 * GB),
    ("dev", "cuda"): int(3.0 * GB),
}
BOOTSTRAP_ESTIMATE = int(0.5 * GB)  # the tar on disk + the imported layer
PIP_STAGE_FACTOR = 2  # runtime/dev install into a builder stage first: the stage layer + the copy
DISK_MARGIN = 2 * GB
DONE = ("built", "up-to-date")
FAILED = ("failed", "not-built")


class BuildFailed(ImagebuildError):
    pass


class DiskSpaceError(ImagebuildError):
    pass


def default_jobs() -> int:
    return max(2, min(4, (os.cpu_count() or 2) // 2))


@dataclass
class BuildOptions:
    jobs: int = field(default_factory=default_jobs)
    force: bool = False
    only: tuple[str, ...] = ()  # fnmatch patterns on tag, short tag or id
    keep_going: bool = False
    log_dir: Path = Path("build/logs")
    created: str | None = None  # CREATED build arg; default: SOURCE_DATE_EPOCH or now (UTC)
    revision: str | None = None  # REVISION build arg; default: `git rev-parse HEAD` or "unknown"
    proxies: dict[str, str] | None = None  # None: HTTP(S)_PROXY/NO_PROXY (+ lowercase) from the environment
    check_disk: bool = True
    force_bootstrap: bool = False
    bootstrap_workdir: Path | None = None
    tag_aliases: bool = True
    build_timeout: int = 6 * 3600  # seconds without a byte from the engine before a build counts as lost
    on_warning: Callable[[str], None] | None = None


# -- plan helpers -----------------------------------------------------------------------------------------------
def order_images(images: list[ImagePlan]) -> list[ImagePlan]:
    """Dependency order (parents first), stable with respect to the plan's order."""
    by_tag = {i.tag: i for i in images}
    if len(by_tag) != len(images):
        dup = sorted({i.tag for i in images if sum(j.tag == i.tag for j in images) > 1})
        raise UsageError(f"the plan lists these tags more than once: {', '.join(dup)}")
    out: list[ImagePlan] = []
    state: dict[str, int] = {}

    def visit(img: ImagePlan, chain: tuple[str, ...]) -> None:
        if state.get(img.tag) == 2:
            return
        if state.get(img.tag) == 1:
            raise UsageError(f"the plan has a parent cycle: {' -> '.join((*chain, img.tag))}")
        state[img.tag] = 1
        if img.parent is not None:
            if img.parent not in by_tag:
                raise UsageError(f"{img.tag}: its parent {img.parent} is not in the plan")
            visit(by_tag[img.parent], (*chain, img.tag))
        state[img.tag] = 2
        out.append(img)

    for img in images:
        visit(img, ())
    return out


def _matches(img: ImagePlan, patterns: tuple[str, ...]) -> bool:
    names = (img.tag, img.short_tag, img.id)
    return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names)


def select_images(plan: Plan, only: tuple[str, ...] = ()) -> tuple[list[ImagePlan], set[str]]:
    """(images to handle in dependency order, tags selected explicitly). Parents of selected images come along."""
    ordered = order_images(plan.images)
    if not only:
        return ordered, {i.tag for i in ordered}
    by_tag = {i.tag: i for i in ordered}
    chosen = {i.tag for i in ordered if _matches(i, only)}
    if not chosen:
        raise UsageError(f"--only {' '.join(only)} matches no image of the plan; images: "
                         + ", ".join(i.id for i in ordered[:20]) + (" ..." if len(ordered) > 20 else ""))
    needed = set(chosen)
    for tag in list(chosen):
        parent = by_tag[tag].parent
        while parent is not None:
            needed.add(parent)
            parent = by_tag[parent].parent
    return [i for i in ordered if i.tag in needed], chosen


def proxy_build_args(env: dict[str, str] | None = None) -> dict[str, str]:
    """Proxy settings as build args only (Docker's predefined ARGs: not persisted in ENV or history)."""
    env = os.environ if env is None else env
    out = {}
    for name in PROXY_VARS:
        for key in (name, name.lower()):
            if env.get(key):
                out[key] = env[key]
                register_secret_url(env[key])
    return out


def register_secret_url(url: str) -> None:
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return
    if parts.password:
        register_secret(parts.password)
        register_secret(urllib.parse.unquote(parts.password))


def _created(options: BuildOptions) -> str:
    if options.created:
        return options.created
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch and epoch.isdigit() else datetime.now(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _revision(options: BuildOptions) -> str:
    if options.revision:
        return options.revision
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def _kind(img: ImagePlan) -> str:
    return "cpu" if img.variant.versions.cuda == "cpu" else "cuda"


def estimate_bytes(images: list[ImagePlan]) -> int:
    total = 0
    for img in images:
        est = SIZE_ESTIMATE.get((img.flavor, _kind(img)), SIZE_ESTIMATE[("runtime", _kind(img))])
        total += est * (PIP_STAGE_FACTOR if img.flavor != "base" else 1)
    return total


def _short(n: int) -> str:
    return f"{n / GB:.1f} GB"


def check_disk(client, to_build: list[ImagePlan], bootstraps: int, free_bytes: int | None = None,
               root: str | None = None) -> str | None:
    """Refuse (DiskSpaceError) when the engine's free space cannot hold the plan; returns a note when unchecked."""
    if not to_build and not bootstraps:
        return None
    if free_bytes is None:
        root = root or local_root_dir(client)
        if root is None:
            return "disk check skipped: the engine's data-root is not on this machine"
        free_bytes = shutil.disk_usage(root).free
    need = estimate_bytes(to_build) + bootstraps * BOOTSTRAP_ESTIMATE + DISK_MARGIN
    if free_bytes < need:
        counts: dict[str, int] = {}
        for img in to_build:
            k = f"{_kind(img).upper() if _kind(img) == 'cpu' else 'CUDA'} {img.flavor}"
            counts[k] = counts.get(k, 0) + 1
        what = ", ".join(f"{n} {k}" for k, n in counts.items())
        raise DiskSpaceError(
            f"not enough disk space for this build: the engine's data-root {root or ''} has {_short(free_bytes)} "
            f"free, building {what} needs about {_short(need)} (estimate incl. builder stages and "
            f"{_short(DISK_MARGIN)} margin); free space (docker image prune / docker builder prune) or build fewer "
            "images with --only"
        )
    return None


# -- the run ----------------------------------------------------------------------------------------------------
class _Run:
    def __init__(self, client, plan: Plan, options: BuildOptions, progress: Progress):
        self.client, self.plan, self.options, self.progress = client, plan, options, progress
        self.images, self.selected = select_images(plan, options.only)
        self.results: dict[str, ImageResult] = {}
        self.tails: dict[str, str] = {}
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.responses: dict[str, object] = {}  # tag -> requests.Response of a running build
        self.containers: set[str] = set()  # intermediate containers the engine announced
        self.base_futures: dict[str, cf.Future] = {}
        self.hash_locks: dict[str, threading.Lock] = {}
        self.created = _created(options)
        self.revision = _revision(options)
        self.proxies = proxy_build_args() if options.proxies is None else dict(options.proxies)
        for v in self.proxies.values():
            register_secret_url(v)
        self.log_dir = Path(options.log_dir)
        self.running: dict[cf.Future, ImagePlan] = {}

    # results -------------------------------------------------------------------------------------------------
    def _result(self, img: ImagePlan) -> ImageResult:
        with self.lock:
            if img.tag not in self.results:
                self.results[img.tag] = ImageResult(
                    tag=img.tag, flavor=img.flavor, inputs_hash=img.inputs_hash,
                    versions=img.variant.versions.as_dict(), parent=img.parent,
                )
            return self.results[img.tag]

    def _warn(self, text: str) -> None:
        if self.options.on_warning:
            self.options.on_warning(text)
        self.progress.note(f"warning: {text}")

    # base sources --------------------------------------------------------------------------------------------
    def _base_key(self, img: ImagePlan) -> str:
        b = img.variant.base
        if b.kind == "registry":
            return f"registry:{b.ref}"
        return f"bootstrap:{bootstrap_mod.spec_for(img.variant).hash()}"

    def base_image_id(self, img: ImagePlan) -> str:
        """The OS image for a parentless image: bootstrapped or pulled once per distinct source."""
        key = self._base_key(img)
        with self.lock:
            fut = self.base_futures.get(key)
            owner = fut is None
            if owner:
                fut = cf.Future()
                self.base_futures[key] = fut
        if not owner:
            self.progress.set(img.tag, "waiting", "for its OS base image")
            return fut.result()
        try:
            b = img.variant.base
            if b.kind == "registry":
                if not b.ref:
                    raise UsageError(f"{img.tag}: base source 'registry' without a reference")
                self.progress.set(img.tag, "pulling", b.ref)
                image_id = ensure_pulled(self.client, b.ref, warn=self._warn)
            elif b.kind == "bootstrap":
                spec = bootstrap_mod.spec_for(img.variant)
                existing = None if self.options.force_bootstrap else bootstrap_mod.find_existing(self.client, spec)
                if existing:
                    image_id = existing
                else:
                    self.progress.set(img.tag, "bootstrapping",
                                      f"{spec.os_id} ({spec.codename}) from {redact(spec.mirror)}")
                    res = bootstrap_mod.ensure_bootstrap(
                        self.client, spec, force=self.options.force_bootstrap, log_dir=self.log_dir,
                        workdir=self.options.bootstrap_workdir,
                        on_line=lambda ln: self.progress.line(img.tag, ln),
                    )
                    image_id = res.image_id
                    self.progress.note(f"bootstrapped {res.tag} with {res.tool} in {res.seconds:.0f}s", style="")
            else:
                raise UsageError(f"{img.tag}: unknown base source kind {b.kind!r}")
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        fut.set_result(image_id)
        return image_id

    # up to date ----------------------------------------------------------------------------------------------
    def find_up_to_date(self, img: ImagePlan, base_id: str) -> str | None:
        import docker

        def ok(labels: dict | None) -> bool:
            labels = labels or {}
            return labels.get(INPUTS_LABEL) == img.inputs_hash and labels.get(BASE_LABEL) == base_id

        try:
            info = self.client.api.inspect_image(img.tag)
            if ok((info.get("Config") or {}).get("Labels")):
                return info["Id"]
        except docker.errors.ImageNotFound:
            pass
        found = self.client.api.images(filters={"label": [f"{INPUTS_LABEL}={img.inputs_hash}",
                                                          f"{BASE_LABEL}={base_id}"]})
        for entry in found:
            if ok(entry.get("Labels")):
                repo, tag = img.tag.rsplit(":", 1)
                self.client.api.tag(entry["Id"], repo, tag)
                return entry["Id"]
        return None

    # one image -----------------------------------------------------------------------------------------------
    def build_one(self, img: ImagePlan) -> ImageResult:
        res = self._result(img)
        start = time.monotonic()
        try:
            if self.cancel.is_set():
                res.status, res.error = "failed", "interrupted"
                return res
            if img.parent is not None:
                base_id = self.results[img.parent].image_id
                assert base_id, f"parent {img.parent} has no image ID"
            else:
                base_id = self.base_image_id(img)
            with self.lock:
                hlock = self.hash_locks.setdefault(img.inputs_hash, threading.Lock())
            with hlock:  # two plan entries with identical inputs build once
                existing = None if self.options.force else self.find_up_to_date(img, base_id)
                if existing:
                    res.status, res.image_id = "up-to-date", existing
                    self._describe(res)
                    res.build_seconds = time.monotonic() - start
                    self._check_budget(img, res)
                    if res.status != "failed":
                        self.progress.set(img.tag, "up-to-date")
                else:
                    self._build(img, res, base_id, start)
                if res.status == "built":
                    self._check_budget(img, res)
                    if res.status != "failed":
                        self.progress.set(img.tag, "built")
        except ImagebuildError as exc:
            res.status, res.error = "failed", redact(str(exc))
        except Exception as exc:  # engine/API errors: one image fails, the run goes on
            res.status, res.error = "failed", redact(f"{type(exc).__name__}: {exc}")
        if res.status == "failed":
            res.build_seconds = res.build_seconds or (time.monotonic() - start)
            if self.cancel.is_set():
                res.error = "interrupted"
                self.progress.set(img.tag, "interrupted")
            else:
                self.progress.set(img.tag, "failed", res.error.splitlines()[0] if res.error else "")
                self.progress.failure(res, self.tails.get(img.tag, ""))
        return res

    def _build(self, img: ImagePlan, res: ImageResult, base_id: str, start: float) -> None:
        import docker

        for v in img.secret_build_args.values():
            register_secret(v)
            register_secret_url(v)
        buildargs = {
            **self.proxies,
            **img.build_args,
            "BASE_IMAGE": base_id,
            "CREATED": self.created,
            "REVISION": self.revision,
            **img.secret_build_args,
        }
        labels = {**img.labels, INPUTS_LABEL: img.inputs_hash, BASE_LABEL: base_id}
        log_path = self.log_dir / f"{img.id}.log"
        res.log_path = str(log_path)
        self.progress.set(img.tag, "building", "sending context")
        context = build_context(img)
        try:
            with open_log(log_path) as log:
                log.write(f"# {img.tag}\n# inputs hash {img.inputs_hash}\n# BASE_IMAGE={base_id}\n")
                stream = BuildStream(log=log)
                try:
                    gen = self.client.api.build(
                        fileobj=context, custom_context=True, decode=True, rm=True, forcerm=True, pull=False,
                        network_mode="host", buildargs=buildargs, labels=labels, tag=img.tag,
                        timeout=self.options.build_timeout,
                    )
                    frame = getattr(gen, "gi_frame", None)
                    with self.lock:
                        if frame is not None and "response" in frame.f_locals:
                            self.responses[img.tag] = frame.f_locals["response"]
                    if self.cancel.is_set():
                        _shutdown(self.responses.get(img.tag))
                    for chunk in gen:
                        for ev in stream.feed(chunk):
                            if ev.kind == "step":
                                self.progress.step(img.tag, ev.step or 0, ev.steps or 0, ev.text)
                            elif ev.kind == "container":
                                with self.lock:
                                    self.containers.add(ev.text)
                            elif ev.kind == "line":
                                self.progress.line(img.tag, ev.text)
                except docker.errors.APIError as exc:
                    stream.fail(exc.explanation or str(exc))
                except Exception as exc:  # connection shut by an interrupt, engine gone
                    if self.cancel.is_set():
                        stream.fail("interrupted")
                    else:
                        stream.fail(f"lost the build stream: {type(exc).__name__}: {exc}")
                finally:
                    with self.lock:
                        self.responses.pop(img.tag, None)
                stream.finish()
        finally:
            context.close()
        res.build_seconds = time.monotonic() - start
        if stream.failed:
            res.status = "failed"
            res.error = stream.failure_summary()
            self.tails[img.tag] = stream.tail_text()
            _set_optional(res, "log_tail", list(stream.tail))
            return
        image_id = stream.image_id or ""
        if not image_id.startswith("sha256:"):
            image_id = self.client.api.inspect_image(image_id)["Id"]
        res.status, res.image_id = "built", image_id
        self._describe(res)

    def _check_budget(self, img: ImagePlan, res: ImageResult) -> None:
        """Matrix `size_budget` per flavor: an image over budget fails (naming its largest layers)."""
        budget = (img.variant.size_budget or {}).get(img.flavor)
        if not budget:
            return
        try:
            from imagebuild.report.budget import check_size_budget
        except ImportError:
            return
        message = check_size_budget(res, budget)
        if message:
            res.status, res.error = "failed", message

    def _describe(self, res: ImageResult) -> None:
        """size, 5 largest layers, aliases."""
        img = self.plan.by_tag()[res.tag]
        try:
            info = self.client.api.inspect_image(res.image_id)
            res.size = int(info.get("Size") or 0)
            hist = self.client.api.history(res.image_id)
            layers = sorted((h for h in hist if h.get("Size")), key=lambda h: h["Size"], reverse=True)[:5]
            res.layers = [{"size": int(h["Size"]), "created_by": redact(h.get("CreatedBy") or "")[:300]}
                          for h in layers]
        except Exception as exc:
            self._warn(f"{res.tag}: could not read size/history: {exc}")
        if self.options.tag_aliases:
            for alias in img.aliases:
                # aliases are full references ("repo:2.9-cuda12.8-runtime") or short tags of the image's repository
                repo, tag = alias.rsplit(":", 1) if ":" in alias.rsplit("/", 1)[-1] else (img.repository, alias)
                try:
                    self.client.api.tag(res.image_id, repo, tag)
                except Exception as exc:
                    self._warn(f"{res.tag}: could not tag alias {alias}: {exc}")

    # scheduling ----------------------------------------------------------------------------------------------
    def execute(self) -> list[ImageResult]:
        names = [(i.tag, i.short_tag) for i in self.images]
        self.progress.start(names)
        for img in self.images:
            self._result(img)
        self._disk_check()
        pending = list(self.images)
        running: dict[cf.Future, ImagePlan] = self.running
        stop_reason: str | None = None
        self.pool = cf.ThreadPoolExecutor(max_workers=max(1, self.options.jobs), thread_name_prefix="build")
        try:
            while pending or running:
                for img in list(pending):
                    parent_res = self.results.get(img.parent) if img.parent else None
                    if parent_res is not None and parent_res.status in FAILED:
                        res = self._result(img)
                        res.status = "not-built"
                        res.error = f"not built: its parent {img.parent} {parent_res.status.replace('-', ' ')}"
                        self.progress.set(img.tag, "not-built", f"parent {parent_res.status}")
                        pending.remove(img)
                        continue
                    if parent_res is not None and parent_res.status not in DONE:
                        continue
                    if stop_reason or self.cancel.is_set():
                        continue
                    pending.remove(img)
                    running[self.pool.submit(self.build_one, img)] = img
                if stop_reason and not running:
                    for img in pending:
                        res = self._result(img)
                        res.status, res.error = "not-built", stop_reason
                        self.progress.set(img.tag, "not-built", "an earlier image failed")
                    pending.clear()
                    break
                if not running:
                    break
                done, _ = cf.wait(list(running), timeout=0.25, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    img = running.pop(fut)
                    res = fut.result()
                    if res.status == "failed" and not self.options.keep_going and not stop_reason:
                        stop_reason = (f"not started: {img.tag} failed (--keep-going builds the images that "
                                       "do not depend on it)")
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
        out = []
        for img in order_images(self.plan.images):
            if img.tag in self.results:
                out.append(self.results[img.tag])
            else:
                out.append(ImageResult(tag=img.tag, flavor=img.flavor, inputs_hash=img.inputs_hash,
                                       versions=img.variant.versions.as_dict(), parent=img.parent,
                                       status="skipped"))
        return out

    def _disk_check(self) -> None:
        if not self.options.check_disk:
            return
        import docker

        to_build, bootstraps = [], set()
        for img in self.images:
            if img.parent is None and img.variant.base.kind == "bootstrap":
                spec = bootstrap_mod.spec_for(img.variant)
                try:
                    self.client.api.inspect_image(spec.tag)
                except docker.errors.ImageNotFound:
                    bootstraps.add(spec.hash())
            if not self.options.force:
                try:
                    labels = (self.client.api.inspect_image(img.tag).get("Config") or {}).get("Labels") or {}
                    if labels.get(INPUTS_LABEL) == img.inputs_hash:
                        continue
                except docker.errors.ImageNotFound:
                    pass
            to_build.append(img)
        note = check_disk(self.client, to_build, len(bootstraps))
        if note:
            self.progress.note(note, style="dim")

    # interrupts ----------------------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Stop: shut the build connections (the engine cancels), stop bootstraps, remove intermediate containers."""
        self.cancel.set()
        bootstrap_mod.terminate_all()
        with self.lock:
            responses = list(self.responses.values())
        for resp in responses:
            _shutdown(resp)
        self.remove_containers()

    def remove_containers(self) -> list[str]:
        import docker

        with self.lock:
            cids = sorted(self.containers)
        removed = []
        for cid in cids:
            try:
                self.client.api.remove_container(cid, force=True)
                removed.append(cid)
            except docker.errors.NotFound:
                pass
            except Exception as exc:
                self.progress.note(f"could not remove build container {cid}: {exc}")
        return removed


def _shutdown(response) -> None:
    """Shut a streaming response's socket from another thread (unblocks the reader; the engine sees EOF)."""
    if response is None:
        return
    sock = None
    for path in (("raw", "_fp", "fp", "raw", "_sock"), ("raw", "_connection", "sock")):
        obj = response
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, socket.socket):
            sock = obj
            break
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        response.close()
    except (OSError, AttributeError):
        pass


def _set_optional(res: ImageResult, name: str, value) -> None:
    if name in {f.name for f in dataclasses.fields(res)}:
        setattr(res, name, value)


class _Terminated(KeyboardInterrupt):
    pass


def build_plan(client, plan: Plan, options: BuildOptions | None = None,
               progress: Progress | None = None) -> list[ImageResult]:
    """Build (or find up to date) every selected image of `plan`; one ImageResult per planned image.

    Raises KeyboardInterrupt after cleaning up when interrupted (SIGINT or SIGTERM).
    """
    options = options or BuildOptions()
    progress = progress or Progress()
    run = _Run(client, plan, options, progress)
    old_term = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        def on_term(signum, frame):
            raise _Terminated()

        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        return run.execute()
    except KeyboardInterrupt:
        # a second Ctrl-C during cleanup should not leave containers behind either: ignore it for a moment
        if in_main:
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            progress.note("interrupted: stopping builds and removing their containers", style="red")
            run.interrupt()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(f.done() for f in list(run.running)):
                cf.wait(list(run.running), timeout=0.5)
                run.remove_containers()
            run.remove_containers()
        finally:
            if in_main:
                signal.signal(signal.SIGINT, old_int)
        raise
    finally:
        if in_main and old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        progress.stop()
