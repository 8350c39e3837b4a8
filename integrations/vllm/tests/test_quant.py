"""asyncrl_vllm reads the quantised checkpoints Go's publisher writes
(publisher.quantize fp8 / mxfp8; the fixtures are written by Go's
weights/quant TestPythonFixtureUpToDate, which fails when they go stale)
and dequantises them to exactly the float32 values the Go engine serves."""

import os

import numpy as np
import pytest

from asyncrl_vllm import quant
from asyncrl_vllm import safetensors_io as sio

TESTDATA = os.path.join(os.path.dirname(__file__), "testdata")


@pytest.mark.parametrize("scheme,scale_dtype", [("fp8", "F32"), ("mxfp8", "U8")])
def test_dequantize_matches_go(scheme, scale_dtype):
    f = sio.SafetensorsFile(os.path.join(TESTDATA, f"quant_{scheme}.safetensors"))
    assert f.metadata["quantization"] == scheme
    scale = "w_scale_inv" if scheme == "fp8" else "w_scale"
    assert f.info("w").dtype == "F8_E4M3"
    assert f.info(scale).dtype == scale_dtype
    got = quant.dequantize_file(f)
    assert list(got) == ["w"]
    want = f.read("w.expected").view("<f4").reshape(f.info("w.expected").shape)
    # bit for bit, NaN where Go served NaN
    assert np.array_equal(got["w"], want, equal_nan=True)
    assert np.isnan(want).sum() == 1


def test_e4m3_and_e8m0_tables():
    assert quant.E4M3[0x38] == 1.0 and quant.E4M3[0x7E] == 448.0 and quant.E4M3[0x01] == 2.0**-9
    assert np.isnan(quant.E4M3[0x7F]) and quant.E4M3[0xB8] == -1.0
    s = quant.e8m0(np.array([127, 0, 254, 255], dtype=np.uint8))
    assert s[0] == 1.0 and s[1] == 2.0**-127 and s[2] == 2.0**127 and np.isnan(s[3])


def test_f8_e8m0_is_a_known_dtype(tmp_path):
    p = str(tmp_path / "s.safetensors")
    sio.write_file(p, [("s", "F8_E8M0", (2,), bytes([127, 130]))])
    f = sio.SafetensorsFile(p)
    assert f.info("s").dtype == "F8_E8M0" and f.read("s").tolist() == [127, 130]


def test_wrong_scale_shape_is_refused():
    with pytest.raises(sio.SafetensorsError):
        quant.dequantize_mxfp8(np.zeros((2, 64), np.uint8), np.zeros((2, 3), np.uint8))
    with pytest.raises(sio.SafetensorsError):
        quant.dequantize_fp8_block(np.zeros((2, 64), np.uint8), np.zeros((2, 1), np.float32))


@pytest.mark.parametrize("scheme", ["fp8", "mxfp8"])
def test_stacked_expert_matrices(scheme, tmp_path):
    """A mixture's experts.weight [E, H, in] holds E matrices quantised one
    by one, codes and scales stacked along E (Go's policy.quantizeTensor):
    each dequantises as the 2-D matrix it is."""
    f = sio.SafetensorsFile(os.path.join(TESTDATA, f"quant_{scheme}.safetensors"))
    scale = "w_scale_inv" if scheme == "fp8" else "w_scale"
    w, s = f.info("w"), f.info(scale)
    codes, scales = f.read("w").tobytes(), f.read(scale).tobytes()
    p = str(tmp_path / "moe.safetensors")
    sio.write_file(p, [("e", "F8_E4M3", (2, *w.shape), codes * 2), ("e" + scale[1:], s.dtype, (2, *s.shape), scales * 2)],
                   metadata={"quantization": scheme})
    got = quant.dequantize_file(sio.SafetensorsFile(p))
    want = f.read("w.expected").view("<f4").reshape(f.info("w.expected").shape)
    assert got["e"].shape == (2, *w.shape)
    assert np.array_equal(got["e"][0], want, equal_nan=True) and np.array_equal(got["e"][1], want, equal_nan=True)
    with pytest.raises(sio.SafetensorsError):
        quant.dequantize_stacked(np.zeros((2, 2, 64), np.uint8), np.zeros((3, 2, 2), np.uint8), quant.dequantize_mxfp8)
