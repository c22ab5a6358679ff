"""amp: a few training steps under autocast (CUDA fp16 + GradScaler, CUDA bf16, CPU bf16); loss must fall."""

from __future__ import annotations

import time

from probe.common import NO_TORCH, Probe


def run(p: Probe):
    torch = p.import_torch()
    p.doc["amp"] = {}
    if torch is None:
        for name in ("amp.cuda_fp16", "amp.cuda_bf16", "amp.cpu_bf16"):
            p.check(name, "skipped", NO_TORCH)
        return
    usable, reason = p.gpu_state()
    for dtype_name in ("fp16", "bf16"):
        name = f"amp.cuda_{dtype_name}"
        if not usable:
            p.check(name, "skipped", reason)
            continue
        res = _amp_train(torch, "cuda", dtype_name, use_scaler=True)
        p.doc["amp"][f"cuda_{dtype_name}"] = res
        p.check(name, res["status"], res["reason"], **res["figures"])
    res = _amp_train(torch, "cpu", "bf16", use_scaler=False)
    p.doc["amp"]["cpu_bf16"] = res
    p.check("amp.cpu_bf16", res["status"], res["reason"], mode="cpu-bf16", **res["figures"])


def _amp_train(torch, device, dtype_name, use_scaler, steps=12):
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    t0 = time.time()
    try:
        torch.manual_seed(0)
        x = torch.randn(256, 64, device=device)
        w_true = torch.randn(64, 1, device=device)
        y = x @ w_true + 0.01 * torch.randn(256, 1, device=device)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        scaler = torch.amp.GradScaler(device, enabled=use_scaler) if use_scaler else None
        losses = []
        out_dtype = None
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with torch.amp.autocast(device, dtype=dtype):
                pred = model(x)
                out_dtype = str(pred.dtype)
                loss = torch.nn.functional.mse_loss(pred.float(), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            losses.append(float(loss.detach().float().cpu()))
        fig = {"dtype": dtype_name, "device": device, "steps": steps, "first_loss": round(losses[0], 5),
               "last_loss": round(losses[-1], 5), "autocast_dtype": out_dtype,
               "seconds": round(time.time() - t0, 3)}
        if scaler is not None:
            fig["scaler_scale"] = float(scaler.get_scale())
        import math

        problems = []
        if not all(math.isfinite(v) for v in losses):
            problems.append("non-finite loss")
        elif not losses[-1] < losses[0]:
            problems.append(f"loss did not decrease ({losses[0]:.4g} -> {losses[-1]:.4g})")
        if out_dtype != str(dtype):
            problems.append(f"autocast produced {out_dtype}, not {dtype}")
        if scaler is not None:
            s = fig["scaler_scale"]
            if not (math.isfinite(s) and s >= 1.0):
                problems.append(f"GradScaler scale {s} is not a finite value >= 1")
        if problems:
            return {"status": "failed", "reason": "; ".join(problems), "figures": fig}
        return {"status": "passed",
                "reason": f"{device} {dtype_name} autocast: loss {losses[0]:.4g} -> {losses[-1]:.4g}"
                + (f", scale {fig['scaler_scale']:g}" if scaler is not None else ""), "figures": fig}
    except Exception as exc:
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:1000], "figures": {}}
