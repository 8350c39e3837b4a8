"""Which BLAS library this process's torch runs its matrix products on.

Debian's python3-torch is built with BLAS_INFO=generic: it calls whatever
libblas.so.3 the dynamic loader finds -- the reference netlib BLAS of
libblas3 unless an optimised one (libopenblas0-pthread, ...) is installed
or put first on LD_LIBRARY_PATH. GEMM speed differs several-fold between
them, so every benchmark line records the library it measured."""

from __future__ import annotations

import os

import torch


def blas_library() -> str:
    torch.mm(torch.ones(8, 8), torch.ones(8, 8))  # make sure the BLAS is loaded
    seen = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if "/" in line else ""
                base = os.path.basename(path)
                if ("blas" in base or "mkl" in base) and path not in seen:
                    seen.append(os.path.realpath(path))
    except OSError:
        return "unknown"
    # torch's libtorch_cpu binds sgemm_ to its own NEEDED libblas.so.3 (listed
    # before liblapack.so.3, which may pull in libopenblas.so.0 as well):
    # that one goes first, the GEMM this process runs on
    seen.sort(key=lambda p: not os.path.basename(p).startswith("libblas"))
    return ",".join(dict.fromkeys(seen)) or "unknown"
