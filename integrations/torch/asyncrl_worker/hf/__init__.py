"""Native PyTorch implementations of Hugging Face causal LMs: qwen3,
qwen3_moe, llama and deepseek_v3 (config.py: config.json semantics;
model.py: the forward pass over HF tensor names; rope.py: rotary
embeddings; checkpoint.py: HF checkpoint directories; policy.py: the
worker's model kind hf; randinit.py: random tiny checkpoints)."""

from .config import ARCHITECTURES, ArchConfig, ConfigError, load_config, parse_config  # noqa: F401
from .model import CausalLM, route_layers, tensor_specs  # noqa: F401
