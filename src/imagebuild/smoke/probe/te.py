"""te: transformer_engine imports, and on sm_89+ a te.Linear runs under fp8_autocast. Runs in a child probe
(`--te-child`): a broken TE build can abort the process."""

from __future__ import annotations

import time

from probe.common import Probe, installed_version, run_child


def run(p: Probe):
    try:
        _, installed = installed_version("transformer_engine", "transformer-engine", "transformer_engine_torch")
    except Exception:  # a broken distribution metadata file: treated as not installed, as before
        installed = None
    p.doc["te"] = {"installed": installed}
    if installed is None:
        p.check("te.import", "skipped", "transformer_engine is not installed")
        p.check("te.fp8", "skipped", "transformer_engine is not installed")
        return
    # isolated: a broken TE build can abort the process
    res = run_child(["--sections", "te", "--child", "te"], timeout=p.remaining(300))
    if res.get("error"):
        p.check("te.import", "failed", res["error"])
        p.check("te.fp8", "skipped", "transformer_engine probe did not finish")
        return
    p.doc["te"].update(res.get("te", {}))
    for c in res.get("checks", []):
        p.doc["checks"].append(c)


NEEDS_DRIVER = "needs the NVIDIA driver (libcuda)"


def driver_present() -> bool:
    """Is the driver's libcuda.so.1 loadable here (a GPU container, or a host with the driver)?"""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def classify_import_error(text: str, has_driver: bool) -> tuple[str, str]:
    """(status, reason) for a failed `import transformer_engine.pytorch`.

    Without a driver, an import that fails only because libcuda.so.1 is absent is not a broken install (newer TE
    core libraries link the driver API directly): skipped, saying so. Anything else -- a missing libcudart, cuDNN or
    NCCL, an undefined symbol (ABI mismatch), a Python error -- is a broken install: failed."""
    first = text.strip().splitlines()[0][:800] if text.strip() else text
    if not has_driver and "libcuda.so" in text and not any(
            s in text for s in ("libcudart", "libcudnn", "libnccl", "libcublas", "libnvrtc", "undefined symbol")):
        return "skipped", f"{NEEDS_DRIVER}: {first}"
    return "failed", f"import transformer_engine.pytorch: {first}"


def child(p: Probe):
    t = p.doc.setdefault("te", {})
    t0 = time.time()
    try:
        import transformer_engine  # noqa: F401
        import transformer_engine.pytorch as te
    except Exception as exc:
        status, reason = classify_import_error(f"{type(exc).__name__}: {exc}", driver_present())
        t["import_error"] = reason
        p.check("te.import", status, reason)
        p.check("te.fp8", "skipped", "transformer_engine does not import")
        return
    t["version"] = getattr(transformer_engine, "__version__", None)
    t["import_seconds"] = round(time.time() - t0, 3)
    p.check("te.import", "passed", f"transformer_engine {t['version']}", seconds=t["import_seconds"])
    torch = p.import_torch()
    usable, reason = p.gpu_state()
    if not usable:
        p.check("te.fp8", "skipped", reason)
        return
    cap = torch.cuda.get_device_capability(0)
    if cap < (8, 9):
        p.check("te.fp8", "skipped", f"FP8 needs sm_89+, GPU is sm_{cap[0]}{cap[1]}")
        return
    try:
        from transformer_engine.common import recipe

        torch.manual_seed(0)
        layer = te.Linear(768, 768, bias=True).cuda()
        x = torch.randn(32, 768, device="cuda", requires_grad=True)
        rec = recipe.DelayedScaling(margin=0, fp8_format=recipe.Format.HYBRID)
        fp8_ctx = getattr(te, "fp8_autocast", None) or te.autocast
        with fp8_ctx(enabled=True, fp8_recipe=rec):
            y = layer(x)
        loss = y.float().pow(2).mean()
        loss.backward()
        torch.cuda.synchronize()
        finite = bool(torch.isfinite(y).all().item()) and bool(torch.isfinite(x.grad).all().item())
        wgrad = layer.weight.grad is not None and bool(torch.isfinite(layer.weight.grad).all().item())
        fig = {"sm": f"sm_{cap[0]}{cap[1]}", "loss": float(loss.item()), "out_dtype": str(y.dtype)}
        if finite and wgrad:
            p.check("te.fp8", "passed", "te.Linear forward/backward under fp8_autocast", **fig)
        else:
            p.check("te.fp8", "failed", "non-finite output or gradient under fp8_autocast", **fig)
    except Exception as exc:
        p.check("te.fp8", "failed", f"{type(exc).__name__}: {exc}"[:1000])
