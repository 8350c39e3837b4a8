"""The data-parallel worker group (Init `group`, docs/protocol.md "Worker groups").

asyncrl's Go side owns the rendezvous: it picks a free TCP port on its host,
starts `world_size` copies of this worker and sends each an Init whose
`group` says {rank, world_size, addr, port, timeout_s}. Every rank keeps a
full replica of the model and the optimiser (data parallel); a TrainBatch
reaches every rank with the whole mini-batch and `microbatch_ranks`, the
rank of each microbatch, so the per-sequence loss weights are computed over
the whole mini-batch exactly as with one rank. Each rank runs only its own
microbatches; then ONE all-reduce (SUM) of the flattened gradients and one of
the metric sums make every rank's gradient the one-rank gradient (the loss
is a weighted sum over the mini-batch: a sum of the ranks' parts, not a
mean), and every rank takes the same clip and AdamW step.

Collectives are reached by every rank on every step, whatever happens in it:
a non-finite loss on one rank is a flag in the metric all-reduce, so all ranks
refuse the step together instead of one rank raising while the others wait
in a collective.
"""

from __future__ import annotations

import datetime
import resource
import time
from dataclasses import dataclass

import torch

from .frames import FrameError


def _bad(field: str, message: str) -> FrameError:
    return FrameError("bad_field", field, message)


@dataclass
class Group:
    rank: int = 0
    world: int = 1
    backend: str = ""
    addr: str = ""
    port: int = 0
    timeout_s: float = 0.0

    @property
    def active(self) -> bool:
        return self.world > 1


def parse_group(g) -> Group:
    """Init.group (absent or null: a world of one)."""
    if g is None:
        return Group()
    if not isinstance(g, dict):
        raise _bad("group", "must be a map {rank, world_size, addr, port, timeout_s}")
    allowed = {"rank", "world_size", "addr", "port", "timeout_s", "backend"}
    for k in g:
        if k not in allowed:
            raise _bad(f"group.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
    for k in ("rank", "world_size", "addr", "port", "timeout_s"):
        if k not in g:
            raise _bad(f"group.{k}", "missing")

    def integer(k, lo):
        v = g[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise _bad(f"group.{k}", f"must be an integer ≥ {lo}, got {v!r}")
        return v

    world = integer("world_size", 1)
    rank = integer("rank", 0)
    if rank >= world:
        raise _bad("group.rank", f"{rank} is not a rank of a world of {world}")
    port = integer("port", 0)
    if world > 1 and not 0 < port < 65536:
        raise _bad("group.port", f"must be a TCP port, got {port}")
    addr = g["addr"]
    if not isinstance(addr, str) or (world > 1 and not addr):
        raise _bad("group.addr", "must be the rendezvous host (rank 0's address)")
    t = g["timeout_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
        raise _bad("group.timeout_s", f"must be a positive number of seconds, got {t!r}")
    backend = g.get("backend", "")
    if backend not in ("", "gloo", "nccl"):
        raise _bad("group.backend", f"must be gloo, nccl or empty (gloo on CPU, nccl with CUDA), got {backend!r}")
    return Group(rank=rank, world=world, backend=backend, addr=addr, port=port, timeout_s=float(t))


def join(g: Group, cuda: bool) -> None:
    """Rendezvous with the other ranks (rank 0 hosts the TCP store at
    addr:port). A rank that does not join within timeout_s makes the
    others' join fail: Error{bad_field, group} naming the address."""
    if not g.active:
        return
    import torch.distributed as dist

    if not dist.is_available():
        raise _bad("group", "this torch has no torch.distributed")
    backend = g.backend or ("nccl" if cuda else "gloo")
    if backend == "gloo" and not dist.is_gloo_available():
        raise _bad("group.backend", "this torch has no gloo backend")
    if dist.is_initialized():
        raise _bad("group", "the process group is already initialised (one Init per process)")
    url = f"tcp://{g.addr}:{g.port}"
    try:
        dist.init_process_group(backend, init_method=url, rank=g.rank, world_size=g.world,
                                timeout=datetime.timedelta(seconds=g.timeout_s))
    except (RuntimeError, ValueError) as e:
        raise _bad("group", f"rank {g.rank} of {g.world}: the rendezvous at {url} ({backend}) failed within "
                            f"{g.timeout_s:g}s — a rank did not join (see its log) or the port is taken: {e}") from None


def leave(g: Group) -> bool:
    """Destroy this rank's process group, if it joined one, before the
    process exits; returns whether one was destroyed. Left to the
    interpreter's exit, torch 1.13's gloo group could abort the process
    (SIGABRT after Bye: CI, TestExecTorchStateOfAnotherWorldSize, rank 0 of
    3) while the other ranks closed their connections."""
    if not g.active:
        return False
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.destroy_process_group()
    return True


def broadcast_params(g: Group, params) -> None:
    """Rank 0's weights on every rank (DDP does the same at construction):
    the replicas start equal whatever each rank loaded."""
    if not g.active:
        return
    import torch.distributed as dist

    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


def allreduce_sums(g: Group, values: list[float]) -> list[float]:
    """The element-wise sum over the ranks (float64)."""
    if not g.active:
        return list(values)
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def allreduce_grads(g: Group, params, has_grad: list[bool]) -> float:
    """Sum every parameter's gradient over the ranks in one flat all-reduce;
    returns its wall seconds. has_grad (already reduced over the ranks) says
    which parameters some rank has a gradient for: the others keep None, as
    with one rank (AdamW skips them); a rank without a gradient for a
    parameter some other rank has contributes zeros."""
    if not g.active:
        return 0.0
    import torch.distributed as dist

    live = [p for p, h in zip(params, has_grad) if h]
    if not live:
        return 0.0
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in live])
    t0 = time.perf_counter()
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    took = time.perf_counter() - t0
    off = 0
    for p in live:
        n = p.numel()
        p.grad = flat[off:off + n].view_as(p).clone()
        off += n
    return took


def barrier(g: Group) -> None:
    if g.active:
        import torch.distributed as dist

        dist.barrier()


def memory_bytes(cuda: bool) -> int:
    """The rank's peak memory: CUDA's peak allocation with a GPU, else the
    process's peak resident set (Linux reports ru_maxrss in KiB)."""
    if cuda and torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
