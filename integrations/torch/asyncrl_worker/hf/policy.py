"""The worker's model kind hf on a native architecture: a CausalLM loaded
from an HF checkpoint directory (Init model.path, or a resume state), the
trainer's logits over packed sequences, and its checkpoints.

Checkpoints it writes (through the worker's temporary-directory rename):
  serving (v%08d/): config.json (the input's, torch_dtype bfloat16), BF16
    weights (the router correction bias keeps its stored dtype), sharded
    when the input was (its largest shard's size is the limit, so the same
    tensors split where the input split), generation_config.json and the
    tokenizer / template files copied from the directory the model came
    from -- a complete HF directory vLLM and the Go engine load.
  state (state-v%08d/): the same layout in F32 (plus the worker's
    optimizer.pt); Init {resume} and Init {model.path} both load it.

With a LoRA adapter (Init model.lora, hf/lora.py) only the adapter trains:
  serving (v%08d/) holds the merged weights, BF16(W + scaling * B @ A),
    so every consumer of a full checkpoint keeps working;
  adapter (adapter-v%08d/) is the adapter in PEFT's layout
    (adapter_config.json, adapter_model.safetensors in BF16) for
    /v1/load_lora_adapter on vLLM (--enable-lora) or the Go engine;
  state (state-v%08d/) holds the frozen base in F32 and the adapter's
    files in F32.
"""

from __future__ import annotations

import torch

from . import checkpoint as ck
from ..vocab import Projection
from .model import CausalLM, route_layers


class NativeHFPolicy:
    kind = "hf"
    # The losses read the vocabulary through projection_many (chunked,
    # float32; asyncrl_worker/vocab.py). False: through logits_many's whole
    # [tokens, vocab] logits in float64, as before -- the reference the
    # tests compare with and the "before" of bench/train_step.py --loss.
    chunked_loss = True

    def __init__(self, net: CausalLM, loaded: ck.Loaded):
        self.net = net
        self.loaded = loaded
        self.lora = None  # hf/lora.py LoRA: the only trained tensors when set
        self.base_path = loaded.src_dir  # adapter_config.json's base_model_name_or_path

    def attach_lora(self, adapter, base_path: str | None) -> None:
        """Train adapter (B @ A on the projections it names) instead of the
        model's weights."""
        self.lora = adapter
        self.base_path = base_path or self.base_path
        self.net.set_adapter(adapter)

    @classmethod
    def load(cls, d: str) -> "NativeHFPolicy":
        net, ld = ck.load_model(d)
        return cls(net, ld)

    @property
    def vocab_size(self) -> int:
        return self.net.cfg.vocab_size

    @property
    def max_seq_len(self) -> int:
        return self.net.cfg.max_position_embeddings

    def parameters(self):
        return list(self.lora.parameters()) if self.lora is not None else self.net.trainable()

    def logits_at(self, tokens: torch.Tensor, positions: torch.Tensor, routes=None) -> torch.Tensor:
        return self.net.logits_at(tokens, positions, routes)

    def logits_many(self, seqs, positions, routes=None) -> torch.Tensor:
        """Logits of every sequence's positions, concatenated (one padded
        forward pass for the lot)."""
        return self.net.logits_packed(seqs, positions, routes)

    def projection_many(self, seqs, positions, routes=None) -> Projection:
        """logits_many without the logits: the lm_head's input rows and
        weight, for the loss to reduce over the vocabulary chunk by chunk
        (asyncrl_worker/vocab.py)."""
        hidden, t = self.net.hidden_packed(seqs, positions, routes)
        return Projection(hidden, self.net.head_weight(t))

    def route_shape(self):
        """(rows per token, top_k, experts) of a routes array, None for a dense model."""
        c = self.net.cfg
        layers = route_layers(c)
        return (len(layers), c.top_k, c.num_experts) if layers else None

    def _save(self, d: str, dtype: str, metadata: dict | None = None, tensors: dict | None = None) -> None:
        ld = self.loaded
        ck.save(d, self.net, dtype, src_dir=ld.src_dir, metadata=metadata,
                max_shard_size=ld.shard_limit_for(dtype),
                buffer_dtypes={n: ld.stored_dtypes.get(n, "F32") for n, t in self.net.named_tensors().items()
                               if not t.requires_grad}, tensors=tensors)

    def route_read_layers(self) -> list[int]:
        """The routes rows the model reads (those of its MoE layers)."""
        return [j for j, l in enumerate(route_layers(self.net.cfg)) if self.net.cfg.is_moe_layer(l)]

    def save_serving(self, d: str, step: int) -> None:
        merged = None
        if self.lora is not None:
            with torch.no_grad():
                merged = self.lora.apply({n: t.detach() for n, t in self.net.named_tensors().items()})
        self._save(d, "BF16", tensors=merged)

    def save_adapter(self, d: str, step: int) -> None:
        """The adapter in PEFT's layout, BF16 (what vLLM computes a BF16
        model's LoRA in)."""
        self.lora.save(d, self.base_path, "BF16")

    def save_weights_f32(self, d: str) -> None:
        self._save(d, "F32")
        if self.lora is not None:
            self.lora.save(d, self.base_path, "F32")
