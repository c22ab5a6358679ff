"""imagebuild TF32 policy for this image: on by default.

Loaded at interpreter start by imagebuild_tf32.pth. It never imports torch itself: a one-shot import hook waits for
the first `import torch` and then sets, in this order (the order keeps torch's legacy/new consistency check happy):
  torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32            (every torch)
  torch.backends.{cuda.matmul,cudnn,cudnn.conv,cudnn.rnn}.fp32_precision = tf32|ieee (torch >= 2.9)
IMAGEBUILD_TF32=1/0 in the environment overrides the image default for one process.
"""

import os
import sys

DEFAULT = True
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def enabled():
    value = os.environ.get("IMAGEBUILD_TF32", "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return DEFAULT


def apply(torch, on=None):
    """Set the TF32 flags on an imported torch module; returns the policy applied."""
    import warnings

    on = enabled() if on is None else bool(on)
    precision = "tf32" if on else "ieee"
    backends = torch.backends
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for owner, attr in ((backends.cuda.matmul, "allow_tf32"), (backends.cudnn, "allow_tf32")):
            setattr(owner, attr, on)
        for owner in (backends.cuda.matmul, backends.cudnn, getattr(backends.cudnn, "conv", None),
                      getattr(backends.cudnn, "rnn", None)):
            if owner is not None and hasattr(owner, "fp32_precision"):
                owner.fp32_precision = precision
    return on


class _TorchHook:
    """Meta path finder that patches torch's loader once, so the policy runs right after torch's __init__."""

    def __init__(self):
        self._busy = False
        self._done = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy or self._done:
            return None
        import importlib.util

        self._busy = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self._done = True
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            try:
                del loader.exec_module
            except AttributeError:
                pass
            original(module)
            try:
                apply(module)
            except Exception as exc:  # never break `import torch`; say why the policy is not in force
                import warnings

                warnings.warn(f"imagebuild: TF32 policy not applied: {exc!r}", RuntimeWarning, stacklevel=2)

        loader.exec_module = exec_module
        return spec


def install():
    if "torch" in sys.modules:
        apply(sys.modules["torch"])
        return
    if not any(isinstance(f, _TorchHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchHook())


install()
