"""vLLM worker extension: the thin glue between vLLM and WeightState.

Start vLLM with ``--worker-extension-cls asyncrl_vllm.WorkerExtension`` (and
VLLM_SERVER_DEV_MODE=1 for POST /collective_rpc). vLLM adds this class to
every worker's bases, so ``self`` is the worker and its methods are callable
by name through collective_rpc on every worker (TP/PP ranks) at once.

How an extension reaches the live model, as upstream does it:
* vllm-project/vllm examples/offline_inference/rlhf_utils.py
  (commit 081b8e32277e01f1f759601c714f808b5e9676b2), WorkerExtension.update_weight:
  ``self.model_runner.model.load_weights(weights=[(name, weight)])``;
* NovaSky-AI/SkyRL skyrl-train/skyrl_train/inference_servers/vllm_worker.py
  (commit 1a48e613beddd8545316caffdcce673da51c80d4), WorkerWrap.load_weights:
  the same call with a list of (name, tensor).
``load_weights`` takes checkpoint names and does the model's own fusing
(qkv, gate_up) and tensor-parallel slicing, which is why every worker keeps
the full checkpoint bytes and hands it whole tensors: live parameters are
not 1:1 with checkpoint tensors.

``load_weights`` alone is not a reload, though: reload.py wraps it in vLLM's
layerwise reload hooks where this vLLM has them (and refuses, naming the
release, where it does not and the model needs them). Both
asyncrl_load_checkpoint and asyncrl_apply_delta go through it.

vLLM adds the extension as a base class of its Worker and refuses one that
defines a name the Worker has (SkyRL's layerwise_reload.py note on
start_weight_update), so every name here carries an asyncrl prefix.

Over HTTP, vLLM's dev-mode route answers {"results": [one per worker]} and
passes dict/list/None results through as JSON but str() of anything else,
so ``asyncrl_loaded_version``'s int arrives as a JSON string ("3", "-1").
The Go driver sends ``version`` as a JSON number; a numeric string works too.

vLLM does not call an extension's ``__init__``; the state is created on
first use. Not importable-tested here (vLLM is not installed in CI); the
logic lives in state.py, delta.py and safetensors_io.py, which are.
"""

from __future__ import annotations

from .reload import Reloader, select_reloader
from .state import WeightState, is_checkpoint_dir


class WorkerExtension:
    """Methods callable through vLLM's POST /collective_rpc."""

    def _asyncrl_state(self) -> WeightState:
        st = getattr(self, "_asyncrl_weight_state", None)
        if st is None:
            st = WeightState()
            self._asyncrl_weight_state = st
        return st

    def _asyncrl_reloader(self) -> Reloader:
        """How this worker's model takes new weights (reload.select_reloader);
        raises ReloadUnsupportedError before anything is touched."""
        return select_reloader(
            self.model_runner.model,
            model_config=getattr(self, "model_config", None),
            vllm_config=getattr(self, "vllm_config", None),
            device=getattr(self, "device", None),
            # vLLM's own start/finish_weight_update session (Worker, vLLM >= 0.22)
            native_update_active=bool(getattr(self, "_weight_update_active", False)),
        )

    def asyncrl_load_checkpoint(self, dir: str, version: int) -> dict:
        """Loads the Hugging Face safetensors checkpoint in dir (model.safetensors
        or sharded with model.safetensors.index.json) into the live model and
        records it as version. Returns {"version": v, "tensors": n}."""
        r = self._asyncrl_reloader()
        return self._asyncrl_state().load_checkpoint(dir, int(version), r.load)

    def asyncrl_apply_delta(self, dir: str, version: int) -> dict:
        """Applies delta version (dir: its delta-{v:08d}/ directory, or the sync
        root holding it) in place, after verifying every checksum. Version
        must be the loaded version + 1 (the same version again is a no-op).
        Returns {"version": v, "patched": n, "skipped": [names]}.

        With nothing loaded yet, version 1 adopts the directory vLLM was
        started from (model_config.model, if it is a local checkpoint
        directory) as version 0 without reloading it."""
        st = self._asyncrl_state()
        r = self._asyncrl_reloader()
        if st.version is None and int(version) == 1:
            served = getattr(getattr(self, "model_config", None), "model", None)
            if isinstance(served, str) and is_checkpoint_dir(served):
                st.adopt_checkpoint(served, 0)
        return st.apply_delta(dir, int(version), r.load, r.resend)

    def asyncrl_loaded_version(self) -> int:
        """The version the live weights hold: -1 when nothing was loaded
        through this extension or a failed load left them half-updated."""
        return self._asyncrl_state().loaded_version()
