"""Dequantisation of asyncrl's quantised serving checkpoints
(publisher.quantize; Go: weights/quant), in numpy.

* fp8: "<w>" F8_E4M3 [N, K] and "<w>_scale_inv" F32 [ceil(N/128),
  ceil(K/128)]; value = e4m3(code) * scale of the code's 128x128 block
  (DeepSeek-V3's layout, which vLLM's Fp8LinearMethod loads natively).
* mxfp8: "<w>" F8_E4M3 [N, K] and "<w>_scale" U8 (E8M0 bytes; F8_E8M0 is
  read too) [N, ceil(K/32)]; value = e4m3(code) * 2**(scale - 127) (vLLM's
  ModelOpt MXFP8 layout, mxfp8_utils.dequant_mxfp8_to_bf16; U8 because
  vLLM's scale parameter is uint8 and its loader casts by value).

The scheme is named in the safetensors metadata under "quantization". Real
vLLM serves these checkpoints with its own kernels; this module is for
tools and tests that need the served float values (the products are
computed in float32, as the Go engine does, so they match it bit for bit).
"""

from typing import Dict

import numpy as np

from .safetensors_io import SafetensorsError

QUANTIZATION_KEY = "quantization"
FP8_BLOCK = (128, 128)
MX_BLOCK = 32


def _e4m3_table() -> np.ndarray:
    t = np.empty(256, dtype=np.float32)
    for b in range(256):
        exp, man = (b >> 3) & 0xF, b & 7
        if exp == 0xF and man == 7:
            v = float("nan")
        elif exp == 0:
            v = man / 8 * 2.0**-6
        else:
            v = (1 + man / 8) * 2.0 ** (exp - 7)
        t[b] = -v if b & 0x80 else v
    return t


E4M3 = _e4m3_table()


def e8m0(scale: np.ndarray) -> np.ndarray:
    """E8M0 bytes -> float32 scales: 2**(b - 127), NaN for 255."""
    b = scale.astype(np.int32)
    out = np.ldexp(np.float32(1), np.minimum(b, 254) - 127).astype(np.float32)
    out[b == 255] = np.nan
    return out


def dequantize_fp8_block(codes: np.ndarray, scale_inv: np.ndarray, block=FP8_BLOCK) -> np.ndarray:
    n, k = codes.shape
    bn, bk = block
    want = (-(-n // bn), -(-k // bk))
    if scale_inv.shape != want:
        raise SafetensorsError(f"fp8 scale shape {scale_inv.shape}, want {want}")
    s = np.repeat(np.repeat(scale_inv.astype(np.float32), bn, axis=0), bk, axis=1)[:n, :k]
    return E4M3[codes] * s


def dequantize_mxfp8(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    n, k = codes.shape
    want = (n, -(-k // MX_BLOCK))
    if scale.shape != want:
        raise SafetensorsError(f"mxfp8 scale shape {scale.shape}, want {want}")
    s = np.repeat(e8m0(scale), MX_BLOCK, axis=1)[:, :k]
    return E4M3[codes] * s


def dequantize_file(f) -> Dict[str, np.ndarray]:
    """Every quantised weight of an open SafetensorsFile, dequantised to
    float32 (the other tensors are left to the caller)."""
    scheme = (f.metadata or {}).get(QUANTIZATION_KEY)
    if scheme not in ("fp8", "mxfp8"):
        raise SafetensorsError(f"metadata {QUANTIZATION_KEY}={scheme!r}: not an fp8/mxfp8 checkpoint")
    suffix = "_scale_inv" if scheme == "fp8" else "_scale"
    out = {}
    names = set(f.names())
    for name in sorted(names):
        info = f.info(name)
        if info.dtype != "F8_E4M3" or name + suffix not in names:
            continue
        codes = f.read(name).view(np.uint8).reshape(info.shape)
        si = f.info(name + suffix)
        raw = f.read(name + suffix)
        if scheme == "fp8":
            if si.dtype != "F32":
                raise SafetensorsError(f"{name}{suffix} is {si.dtype}, want F32")
            scales, one = raw.view("<f4").reshape(si.shape), dequantize_fp8_block
        else:
            if si.dtype not in ("F8_E8M0", "U8"):
                raise SafetensorsError(f"{name}{suffix} is {si.dtype}, want U8 (or F8_E8M0)")
            scales, one = raw.view(np.uint8).reshape(si.shape), dequantize_mxfp8
        out[name] = dequantize_stacked(codes, scales, one)
    return out


def dequantize_stacked(codes: np.ndarray, scales: np.ndarray, one) -> np.ndarray:
    """one(codes, scales) for a 2-D weight; a 3-D one is a mixture's
    experts.weight [E, H, in] whose E matrices Go quantised one by one
    (policy.quantizeTensor: codes [E, H, in], scales [E, ...])."""
    if codes.ndim == 2:
        return one(codes, scales)
    if codes.ndim != 3 or scales.ndim != 3 or scales.shape[0] != codes.shape[0]:
        raise SafetensorsError(f"codes {codes.shape} and scales {scales.shape} are not stacked expert matrices")
    return np.stack([one(c, s) for c, s in zip(codes, scales)])
