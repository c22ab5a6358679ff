"""tf32: the image's TF32 policy in a fresh process (both flag APIs), and on a GPU: TF32 speed-up and accuracy."""

from __future__ import annotations

import os
import statistics
import sys

from probe.common import NO_TORCH, Probe


def run(p: Probe):
    torch = p.import_torch()
    if torch is None:
        p.doc["tf32"] = {}
        p.check("tf32.policy", "skipped", NO_TORCH)
        return
    state = p.doc.get("tf32_at_import") or tf32_state(torch)
    t = {"at_import": state, "env_override": os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"),
         "hook": _find_tf32_hook()}
    p.doc["tf32"] = t
    p.check("tf32.policy", "passed", "tf32 matmul " + ("on" if state.get("matmul_tf32") else "off")
               + " in a fresh process", **state)
    usable, reason = p.gpu_state()
    if not usable:
        p.check("tf32.speedup", "skipped", reason)
        p.check("tf32.accuracy", "skipped", reason)
        return
    n = 4096
    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, generator=gen)
    b = torch.randn(n, n, device=dev, generator=gen)
    ref = (a.double() @ b.double())
    ref_norm = ref.norm().item()

    def rel_err(c):
        return ((c.double() - ref).norm() / ref_norm).item()

    err_default = rel_err(a @ b)  # the image's policy, untouched
    saved = save_tf32(torch)
    try:
        set_tf32(torch, False)
        t_off = time_cuda(torch, lambda: a @ b, warmup=3, reps=10)
        err_off = rel_err(a @ b)
        set_tf32(torch, True)
        t_on = time_cuda(torch, lambda: a @ b, warmup=3, reps=10)
        err_on = rel_err(a @ b)
    finally:
        restore_tf32(torch, saved)
    speedup = t_off / t_on if t_on > 0 else 0.0
    flops = 2 * n ** 3
    fig = {"n": n, "ms_ieee": round(t_off * 1e3, 3), "ms_tf32": round(t_on * 1e3, 3),
           "speedup": round(speedup, 2), "tflops_ieee": round(flops / t_off / 1e12, 1),
           "tflops_tf32": round(flops / t_on / 1e12, 1), "rel_err_ieee": err_off, "rel_err_tf32": err_on,
           "rel_err_default": err_default}
    t["gpu"] = fig
    if speedup >= 1.3:
        p.check("tf32.speedup", "passed", f"TF32 {speedup:.1f}x faster than IEEE fp32", **fig)
    else:
        p.check("tf32.speedup", "failed", f"TF32 only {speedup:.2f}x the IEEE fp32 speed (want >= 1.3x)",
                   **fig)
    ok_err = err_on < 5e-3 and err_off < 1e-5
    # the default state really computes in TF32 iff its error is TF32-sized (not IEEE-sized)
    default_is_tf32 = err_default > 2e-5
    fig["default_is_tf32"] = default_is_tf32
    if not ok_err:
        p.check("tf32.accuracy", "failed",
                   f"relative error vs float64: tf32 {err_on:.2e} (want < 5e-3), ieee {err_off:.2e}", **fig)
    else:
        p.check("tf32.accuracy", "passed", f"relative error vs float64: tf32 {err_on:.2e}, ieee "
                   f"{err_off:.2e}; default matmul runs {'TF32' if default_is_tf32 else 'IEEE fp32'}", **fig)


def _find_tf32_hook():
    try:
        import site

        dirs = site.getsitepackages()
    except Exception:
        dirs = []
    for d in dirs + [p for p in sys.path if p.endswith("-packages")]:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if n.endswith(".pth") and "tf32" in n:
                return os.path.join(d, n)
    return None


def tf32_state(torch) -> dict:
    """Both the legacy allow_tf32 flags and the 2.9+ fp32_precision API, read without changing anything."""
    import warnings

    st: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, getter in (
            ("matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
            ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
            ("float32_matmul_precision", lambda: torch.get_float32_matmul_precision()),
            ("fp32_precision", lambda: torch.backends.fp32_precision),
            ("matmul_fp32_precision", lambda: torch.backends.cuda.matmul.fp32_precision),
            ("cudnn_fp32_precision", lambda: torch.backends.cudnn.fp32_precision),
            ("cudnn_conv_fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision),
        ):
            try:
                val = getter()
                st[key] = val if isinstance(val, (bool, str, int, float)) or val is None else str(val)
            except Exception as exc:
                st[key] = None
                st.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"[:200]
    mp = st.get("matmul_fp32_precision")
    st["matmul_tf32"] = bool(st.get("matmul_allow_tf32")) or mp == "tf32" or (
        mp in (None, "none") and st.get("float32_matmul_precision") in ("high", "medium"))
    st["has_fp32_precision_api"] = "matmul_fp32_precision" not in st.get("errors", {})
    return st


def save_tf32(torch):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = {"allow": torch.backends.cuda.matmul.allow_tf32,
                 "prec": torch.get_float32_matmul_precision()}
        try:
            saved["fp32"] = torch.backends.cuda.matmul.fp32_precision
        except Exception:
            pass
    return saved


def set_tf32(torch, on):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
        except Exception:
            torch.backends.cuda.matmul.allow_tf32 = on


def restore_tf32(torch, saved):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "fp32" in saved:
            try:
                torch.backends.cuda.matmul.fp32_precision = saved["fp32"]
                return
            except Exception:
                pass
        torch.backends.cuda.matmul.allow_tf32 = saved["allow"]


def time_cuda(torch, fn, warmup=3, reps=10):
    """Median seconds per call, timed with CUDA events after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)
