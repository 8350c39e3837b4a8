"""asyncrl_vllm: a vLLM worker extension that loads asyncrl checkpoints and
applies asyncrl/SkyRL delta weight versions in place.

``vllm serve MODEL --worker-extension-cls asyncrl_vllm.WorkerExtension``
"""

from .extension import WorkerExtension  # noqa: F401

__all__ = ["WorkerExtension"]
