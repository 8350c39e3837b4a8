"""asyncrl's reference PyTorch trainer worker: speaks the worker-bridge frames
(protocol v1, docs/protocol.md) over stdin/stdout. Run: python3 -m asyncrl_worker."""

__all__ = ["frames", "loss", "model", "safetensors", "worker"]
