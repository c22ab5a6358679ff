"""imagebuild: validated, tested PyTorch + CUDA container images from a YAML version matrix."""

__version__ = "0.1.0"
