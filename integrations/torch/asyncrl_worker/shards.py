"""A worker group's resume state: the optimiser state sharded by rank, with a
manifest (docs/protocol.md "Worker groups", "Checkpoints").

torch 1.13 has no usable torch.distributed.checkpoint, so the layout is our
own. In `state-v%08d/` of a group of W ranks:

  manifest.json                   rank 0: {format, version, step, kind, lora,
                                  world_size, params, param_groups,
                                  shards: [{rank, file, params}]}
  optimizer-0000r-of-0000W.pt     rank r: {step, rank, params, state, torch_rng}:
                                  the AdamW moments of the parameters rank r owns
  config.json, model.safetensors  rank 0: the F32 weights as one rank writes them
                                  (equal on every rank after a DP step; also
                                  loadable as model.path or by Go's LoadServing)

Rank r owns a balanced share of the parameters (largest first, to the least
loaded rank): the moments — two thirds of the state — are written in
parallel, each byte once. The ranks write into one temporary directory and
rank 0 renames it into place after a barrier, so a reader sees a complete
state or none.

Resume reads the manifest and every shard, so a group of any size resumes a
state of any size (data parallel replicates the moments: resharding is a
regrouping of parameter indices) and a single worker resumes a group's state.
A manifest whose shards do not cover the parameters exactly once, or a missing
shard file, is refused before anything is loaded.
"""

from __future__ import annotations

import json
import os
import shutil

import torch

from . import group as grp
from .frames import FrameError

MANIFEST = "manifest.json"
FORMAT = "asyncrl-dp-state"
VERSION = 1


def _bad(message: str) -> FrameError:
    return FrameError("bad_field", "resume", message)


def owners(sizes: list[int], world: int) -> list[int]:
    """The owning rank of each parameter: largest first to the least loaded
    rank (ties: lowest index, lowest rank), so every rank writes about 1/W."""
    load = [0] * world
    own = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        own[i] = r
        load[r] += sizes[i]
    return own


def shard_file(rank: int, world: int) -> str:
    return f"optimizer-{rank:05d}-of-{world:05d}.pt"


def write(final: str, g: grp.Group, step: int, kind: str, lora: bool, params, opt, write_weights) -> str:
    """Every rank of g calls it: the group's state of version step in final
    (replaced if present). write_weights(dir) writes config.json and the F32
    weights (rank 0 only)."""
    parent = os.path.dirname(os.path.abspath(final))
    tmp = os.path.join(parent, "." + os.path.basename(final) + ".tmp-group")
    if g.rank == 0:
        os.makedirs(parent, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    grp.barrier(g)
    sd = opt.state_dict()
    own = owners([p.numel() for p in params], g.world)
    mine = [i for i, r in enumerate(own) if r == g.rank]
    torch.save({"step": step, "rank": g.rank, "params": mine, "state": {i: sd["state"][i] for i in mine if i in sd["state"]},
                "torch_rng": torch.get_rng_state()}, os.path.join(tmp, shard_file(g.rank, g.world)))
    if g.rank == 0:
        write_weights(tmp)
        manifest = {"format": FORMAT, "version": VERSION, "step": step, "kind": kind, "lora": lora,
                    "world_size": g.world, "params": len(params), "param_groups": sd["param_groups"],
                    "shards": [{"rank": r, "file": shard_file(r, g.world), "params": [i for i, o in enumerate(own) if o == r]}
                               for r in range(g.world)]}
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
    grp.barrier(g)  # every shard is in tmp
    if g.rank == 0:
        os.chmod(tmp, 0o755)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
    grp.barrier(g)  # final exists when any rank answers
    return final


def is_sharded(d: str) -> bool:
    return os.path.exists(os.path.join(d, MANIFEST))


def read(d: str, rank: int) -> dict:
    """A group's state in d as one rank's resume dict {step, kind, lora,
    optimizer (the whole AdamW state_dict), torch_rng, world_size}: every
    shard merged; the RNG of the same rank (rank 0's for a rank the writing
    group did not have)."""
    path = os.path.join(d, MANIFEST)
    try:
        with open(path) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        raise _bad(f"cannot read {path}: {e}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("version") != VERSION:
        raise _bad(f"{path}: not an {FORMAT} v{VERSION} manifest (format {m.get('format')!r}, version "
                   f"{m.get('version')!r}); this worker cannot reshard it")
    P, W, shards = m.get("params"), m.get("world_size"), m.get("shards")
    if not isinstance(P, int) or not isinstance(W, int) or not isinstance(shards, list) or len(shards) != W:
        raise _bad(f"{path}: needs params, world_size and one shard per rank")
    seen = [0] * P
    for s in shards:
        for i in s.get("params", []):
            if not isinstance(i, int) or not 0 <= i < P:
                raise _bad(f"{path}: shard {s.get('file')} lists parameter {i!r} of {P}")
            seen[i] += 1
    if any(c != 1 for c in seen):
        i = next(i for i, c in enumerate(seen) if c != 1)
        raise _bad(f"{path}: parameter {i} is in {seen[i]} shards, want exactly one: the state cannot be resharded")
    state, rng = {}, None
    for s in shards:
        fp = os.path.join(d, str(s.get("file")))
        try:
            sh = torch.load(fp, map_location="cpu")
        except (OSError, RuntimeError, EOFError) as e:
            raise _bad(f"shard {s.get('file')} of the {W}-rank state {d} is missing or unreadable ({e}); "
                       "the state cannot be resumed without it") from None
        if sh.get("step") != m["step"] or sorted(sh.get("params", [])) != sorted(s["params"]):
            raise _bad(f"shard {s['file']} holds step {sh.get('step')} parameters {sh.get('params')}, the manifest "
                       f"step {m['step']} parameters {s['params']}")
        state.update(sh["state"])
        if sh.get("rank") == rank or (rng is None and sh.get("rank") == 0):
            rng = sh.get("torch_rng")
    return {"step": m["step"], "kind": m.get("kind"), "lora": bool(m.get("lora")), "world_size": W,
            "optimizer": {"state": state, "param_groups": m["param_groups"]}, "torch_rng": rng}
