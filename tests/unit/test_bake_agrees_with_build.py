"""The bake export is one more consumer of the plan: each target carries exactly the build args and labels `build`
passes for the same image (compared with the builder's own requests to the one fake engine), and the images a bake
makes are up to date for the next `build`: the same labels exactly (a root's base-id is the OS image's ID, which the
export reads as build does; no label names a child's parent: builder/uptodate.py), each target exported as the
BuildKit backend exports (rewrite-timestamp)."""

from __future__ import annotations

import re

import yaml
from _bake_cases import make_plan
from _fake_engine import FakeEngine

from imagebuild.builder.bake import planned_base_ids, planned_source_dates, write_bake
from imagebuild.builder.bootstrap import HASH_LABEL, spec_for
from imagebuild.builder.executor import build_plan
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import Progress

BOOT_DATE, REG_DATE = 1761955200, 1700000000  # two OS images, two source dates: one per chain
OS_LAYERS = ["sha256:" + "0" * 64]
REG_LAYERS = ["sha256:" + "1" * 64]  # the registry base's (another OS image: other layers)


def engine_with_os_images(plan) -> FakeEngine:
    fake = FakeEngine()
    boot, reg = plan.images[0].variant, plan.images[3].variant
    spec = spec_for(boot)
    fake.add_image(spec.tag, {HASH_LABEL: spec.hash()}, Created="2025-11-01T00:00:00Z",
                   RootFS={"Layers": OS_LAYERS})
    fake.add_image(reg.base.ref, {}, Created="2023-11-14T22:13:20Z", RootFS={"Layers": REG_LAYERS})
    return fake


def options(tmp_path, **kw) -> BuildOptions:
    return BuildOptions(log_dir=tmp_path / "logs", check_disk=False, proxies={}, jobs=1, revision="abc123", **kw)


def resolved(value: str, env: dict[str, str]) -> str:
    """A compose value as `docker buildx bake` reads it with `env`: ${NAME:-default}, $$ a literal $."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m[1]) or m[2], value).replace("$$", "$")


def baked_targets(plan, fake, tmp_path, opts, env=None):
    dates, unread = planned_source_dates(plan, fake)
    doc = write_bake(plan, tmp_path / "docker-bake.yml", source_dates=dates, created=opts.created,
                     revision=opts.revision or "", base_ids=planned_base_ids(plan, fake))
    assert doc == yaml.safe_load((tmp_path / "docker-bake.yml").read_text())
    by_tag = {}
    for service in doc["services"].values():
        b = service["build"]
        by_tag[b["tags"][0]] = ({k: resolved(v, env or {}) for k, v in b["args"].items()},
                                {k: resolved(v, env or {}) for k, v in b["labels"].items()})
    return by_tag, unread


def build_requests(plan, fake, opts):
    results = build_plan(fake, plan, opts, Progress())
    assert [r.status for r in results] == ["built"] * len(plan.images)
    return {call["tag"]: call for call in fake.builds}, {r.tag: r.image_id for r in results}


def compare(plan, built, baked):
    for img in plan.images:
        call, (args, labels) = built[img.tag], baked[img.tag]
        # BASE_IMAGE: an image ID for build, a named context for bake; credentialed args: bake's are secrets
        skip = {"BASE_IMAGE", *img.secret_build_args}
        assert {k: v for k, v in args.items() if k not in skip} == \
            {k: v for k, v in call["buildargs"].items() if k not in skip}, img.tag
        assert labels == call["labels"], img.tag


def test_every_target_carries_the_build_args_and_labels_build_passes(tmp_path):
    plan = make_plan()
    fake = engine_with_os_images(plan)
    opts = options(tmp_path)
    baked, unread = baked_targets(plan, fake, tmp_path, opts)
    built, _ = build_requests(plan, fake, opts)
    assert unread == []
    compare(plan, built, baked)
    dates = {img.tag: baked[img.tag][1]["io.imagebuild.source-date-epoch"] for img in plan.images}
    assert [dates[i.tag] for i in plan.images] == [str(BOOT_DATE)] * 3 + [str(REG_DATE)] * 3  # a chain: its OS's
    assert baked[plan.images[2].tag][0]["CREATED"] == "2025-11-01T00:00:00Z"
    assert baked[plan.images[2].tag][0]["REVISION"] == "abc123"


def test_created_option_and_the_environment_s_source_date_agree_too(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    plan = make_plan()
    fake = engine_with_os_images(plan)
    opts = options(tmp_path, created="2026-01-31T12:00:00Z")
    baked, _ = baked_targets(plan, fake, tmp_path, opts)
    built, _ = build_requests(plan, fake, opts)
    compare(plan, built, baked)
    assert {baked[i.tag][0]["SOURCE_DATE_EPOCH"] for i in plan.images} == {"1234567890"}


def test_without_the_os_image_the_date_is_a_guess_and_says_so(tmp_path):
    """Bad case: nothing to read the OS date from: the export names the OS (the caller prints a line), and the
    files's date is not the one build would use."""
    plan = make_plan()
    fake = FakeEngine()
    dates, unread = planned_source_dates(plan, fake)
    assert unread == ["debian12", "debian12b"]
    assert dates[plan.images[0].id] not in (BOOT_DATE, 0)
    dates, unread = planned_source_dates(plan, None)
    assert unread == ["debian12", "debian12b"]


def baked_into(fake, plan, baked, bad: str | None = None) -> dict[str, str]:
    """The bake's images in the engine (its labels, its own layers on its parent's); `bad`: this
    tag's layers do not begin with its parent's (baked on another parent)."""
    ids = {}
    for n, img in enumerate(plan.images):
        depth = ["base", "runtime", "dev"].index(img.flavor) + 1
        layers = (REG_LAYERS if n // 3 else OS_LAYERS) + [f"sha256:{n // 3}{k}" + "f" * 62 for k in range(depth)]
        if img.tag == bad:
            layers = [*OS_LAYERS, "sha256:" + "9" * 64]
        ids[img.tag] = fake.add_image(img.tag, baked[img.tag][1], RootFS={"Layers": layers})
    return ids


def test_images_a_bake_made_are_up_to_date_for_build(tmp_path):
    plan = make_plan()
    fake = engine_with_os_images(plan)
    opts = options(tmp_path)
    baked, _ = baked_targets(plan, fake, tmp_path, opts)
    ids = baked_into(fake, plan, baked)
    results = build_plan(fake, plan, opts, Progress())
    assert [(r.status, r.image_id) for r in results] == [("up-to-date", ids[i.tag]) for i in plan.images]
    assert fake.builds == []


def test_a_baked_child_on_another_parent_is_rebuilt(tmp_path):
    """Bad case: a dev image whose layers differ from its runtime's below its own (baked on another runtime)."""
    plan = make_plan()
    fake = engine_with_os_images(plan)
    opts = options(tmp_path)
    baked, _ = baked_targets(plan, fake, tmp_path, opts)
    dev = plan.images[2]
    ids = baked_into(fake, plan, baked, bad=dev.tag)
    results = build_plan(fake, plan, opts, Progress())
    assert [r.status for r in results] == ["up-to-date", "up-to-date", "built"] + ["up-to-date"] * 3
    assert [c["tag"] for c in fake.builds] == [dev.tag] and results[2].image_id != ids[dev.tag]


def test_a_target_of_another_platform_names_it_as_build_does(tmp_path):
    """build asks BuildKit for --platform only off the default platform; the bake target then says `platforms`
    (both forms), and a default-platform target says nothing (the builder's own, as before)."""
    import dataclasses
    import json

    plan = make_plan()
    arm = dataclasses.replace(plan.images[0].variant, platform="linux/arm64")
    for img in plan.images[:3]:
        img.variant = arm
    compose = write_bake(plan, tmp_path / "c" / "docker-bake.yml")
    bake_json = write_bake(plan, tmp_path / "j" / "docker-bake.json")
    for img in plan.images:
        name = img.id.replace(".", "_")
        want = ["linux/arm64"] if img.variant is arm else None
        assert compose["services"][name]["build"].get("platforms") == want, name
        assert bake_json["target"][name].get("platforms") == want, name
    assert json.loads((tmp_path / "j" / "docker-bake.json").read_text()) == bake_json


def test_each_target_exports_as_the_buildkit_backend_exports(tmp_path):
    """The same layer bytes as build's need rewrite-timestamp: an archive per target on the docker driver with the
    containerd store (its image exporter refuses the option), type=docker elsewhere, the builder's own otherwise."""
    from imagebuild.builder.backends.buildkit.argv import EXPORT_OPTIONS
    from imagebuild.builder.bake import OUTPUT_ARCHIVE, OUTPUT_ENGINE, OUTPUT_LOAD, archives

    plan = make_plan()
    fake = engine_with_os_images(plan)
    dates, _ = planned_source_dates(plan, fake)
    want = {OUTPUT_ARCHIVE: "type=docker,dest=bake-images/{}.tar," + EXPORT_OPTIONS,
            OUTPUT_LOAD: "type=docker," + EXPORT_OPTIONS, OUTPUT_ENGINE: None}
    for outputs, spec in want.items():
        for name in ("docker-bake.yml", "docker-bake.json"):
            doc = write_bake(plan, tmp_path / outputs / name, source_dates=dates, outputs=outputs)
            if name.endswith(".yml"):
                got = {k: (s["build"].get("x-bake") or {}).get("output") for k, s in doc["services"].items()}
            else:
                got = {k: t.get("output") for k, t in doc["target"].items()}
            assert got == {k: [spec.format(k)] if spec else None for k in got}, (outputs, name)
            found = archives(doc)
            assert found == ([f"bake-images/{k}.tar" for k in got] if outputs == OUTPUT_ARCHIVE else [])
            # buildx opens each archive's file without making its folder: the export makes it
            assert (tmp_path / outputs / "bake-images").is_dir() == (outputs == OUTPUT_ARCHIVE)
