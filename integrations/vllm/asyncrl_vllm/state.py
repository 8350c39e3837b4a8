"""The receiver-like state a worker keeps between weight updates.

Like asyncrl's Go receiver (weights/receiver/receiver.go), the state keeps
its own copy of the current checkpoint's bytes (per tensor, in host memory)
and the version they are, replays deltas onto that copy, and hands the new
tensors to the engine (here: a ``load_fn`` callback, vLLM's
``model.load_weights``) only after every checksum of the version verified:

* a delta must be version current+1 with base_version current (ChainError
  otherwise); the same version again is a no-op (a retried call), a lower
  one is refused;
* on any manifest, payload, mismatch or checksum error nothing changes: not
  the kept bytes, not the live parameters, not the version;
* if ``load_fn`` itself fails half-way, the live parameters are half
  updated: the state becomes dirty (the receiver's write_in_progress) and
  refuses deltas until a full checkpoint is loaded again.

``load_fn`` receives an iterator of (name, torch tensor) and must copy the
tensors (vLLM's load_weights does); each tensor shares memory with the kept
bytes.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from . import delta as d
from .safetensors_io import open_checkpoint, to_torch

LoadFn = Callable[[Iterable[Tuple[str, object]]], object]
ResendFn = Callable[[List[str], List[str]], List[str]]


class StateError(d.DeltaError):
    """The state cannot take this call (nothing loaded, dirty, version order)."""


class WeightState:
    def __init__(self) -> None:
        self.version: Optional[int] = None  # None: no checkpoint loaded
        self.dirty = False  # live params half-updated by a failed load_fn
        self.tensors: Dict[str, d.CurrentTensor] = {}
        self.checkpoint_dir: Optional[str] = None

    def loaded_version(self) -> int:
        """The version the live parameters hold, -1 when unknown (nothing
        loaded through this state yet, or a failed load left them dirty)."""
        if self.version is None or self.dirty:
            return -1
        return self.version

    # -- full checkpoints ------------------------------------------------

    @staticmethod
    def _read_checkpoint(dir: str) -> Dict[str, d.CurrentTensor]:
        ck = open_checkpoint(dir)
        return {n: d.CurrentTensor(ck.info(n).dtype, ck.info(n).shape, ck.read(n)) for n in ck.names()}

    def adopt_checkpoint(self, dir: str, version: int) -> dict:
        """Records dir's bytes as version without loading them: for the
        checkpoint the engine already serves (vLLM started from it)."""
        if version < 0:
            raise StateError(f"adopt_checkpoint: version {version}: want >= 0")
        tensors = self._read_checkpoint(dir)
        self.tensors, self.version, self.dirty, self.checkpoint_dir = tensors, version, False, dir
        return {"version": version, "tensors": len(tensors)}

    def load_checkpoint(self, dir: str, version: int, load_fn: LoadFn) -> dict:
        """Reads every tensor of dir, loads them all through load_fn, then
        records them as version. A read error changes nothing; a load_fn
        error leaves the state dirty."""
        if version < 0:
            raise StateError(f"load_checkpoint: version {version}: want >= 0")
        tensors = self._read_checkpoint(dir)  # may raise: nothing touched yet
        self.dirty = True
        sent = _Counter(((n, to_torch(t.data, t.dtype, t.shape)) for n, t in tensors.items()))
        try:
            load_fn(sent)
        except Exception as e:
            raise StateError(f"load_checkpoint {dir} (version {version}): load_weights failed after {sent.n} of {len(tensors)} tensors, live weights are half-loaded; load a full checkpoint again: {e}") from e
        if sent.n != len(tensors):
            raise StateError(f"load_checkpoint {dir} (version {version}): load_weights consumed {sent.n} of {len(tensors)} tensors; live weights are incomplete")
        self.tensors, self.version, self.dirty, self.checkpoint_dir = tensors, version, False, dir
        return {"version": version, "tensors": len(tensors)}

    # -- deltas ------------------------------------------------------------

    def apply_delta(self, dir: str, version: int, load_fn: LoadFn, resend: Optional[ResendFn] = None) -> dict:
        """Applies delta version (dir: its delta-{v:08d} directory or the
        sync root holding it) to the kept bytes and the live parameters.

        resend(changed, all_names) names the tensors handed to load_fn (a
        superset of the changed ones, from the kept checkpoint): vLLM's
        layerwise reload needs whole layers (reload.Reloader.resend). By
        default only the changed tensors are sent, each as soon as it is
        patched."""
        if self.version is None:
            raise StateError(f"apply_delta version {version}: no checkpoint loaded; call asyncrl_load_checkpoint(dir, version) first")
        if self.dirty:
            raise StateError(f"apply_delta version {version}: live weights are half-updated by a failed load; call asyncrl_load_checkpoint first")
        cur = self.version
        if version == cur:
            return {"version": cur, "patched": 0, "skipped": [], "already_applied": True}
        if version < cur:
            raise d.ChainError(f"apply_delta version {version}: the live weights are already at version {cur} (versions only increase)")
        if version != cur + 1:
            raise d.ChainError(f"apply_delta version {version}: the live weights are at version {cur}; apply version {cur + 1} first")
        vdir = d.resolve_version_dir(dir, version)
        man = d.read_manifest_dir(vdir, version)
        if man.base_version != cur:
            raise d.ChainError(f"version {version} ({vdir}) has base_version {man.base_version}, but the live weights are at version {cur}")
        prep = d.prepare(man, vdir, self.tensors)  # verifies everything; touches nothing
        changed = [e.name for e in prep.todo]
        send = resend(changed, list(self.tensors)) if resend is not None and changed else changed
        if not set(changed) <= set(send):
            raise ValueError(f"apply_delta version {version}: resend dropped changed tensors {sorted(set(changed) - set(send))}")
        self.dirty = True
        names: List[str] = []

        def patched() -> Iterator[Tuple[str, object]]:
            if len(send) == len(changed):  # the same set: stream, patch one and hand it over
                todo = prep.apply(self.tensors)
            else:  # every patch first: unchanged tensors of a unit go too
                for _ in prep.apply(self.tensors):
                    pass
                todo = iter(send)
            for name in todo:
                names.append(name)
                t = self.tensors[name]
                yield name, to_torch(t.data, t.dtype, t.shape)

        try:
            if send:
                load_fn(patched())
        except Exception as e:
            raise StateError(f"apply_delta version {version}: load_weights failed after {len(names)} of {len(send)} tensors; live weights are half-updated, call asyncrl_load_checkpoint: {e}") from e
        if len(names) != len(send):
            raise StateError(f"apply_delta version {version}: load_weights consumed {len(names)} of {len(send)} tensors; live weights are half-updated, call asyncrl_load_checkpoint")
        self.version, self.dirty = version, False
        out = {"version": version, "patched": len(changed), "skipped": prep.skipped}
        if len(send) != len(changed):
            out["resent"] = len(send) - len(changed)
        return out


class _Counter:
    """Wraps an iterator and counts what was taken from it."""

    def __init__(self, it):
        self._it, self.n = iter(it), 0

    def __iter__(self):
        return self

    def __next__(self):
        x = next(self._it)
        self.n += 1
        return x


def is_checkpoint_dir(path: str) -> bool:
    return os.path.isdir(path) and (
        os.path.isfile(os.path.join(path, "model.safetensors")) or os.path.isfile(os.path.join(path, "model.safetensors.index.json"))
    )
