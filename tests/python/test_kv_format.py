"""The quantized KV formats bit for bit (kvfuzz/kv_format.h): kvfuzz's fp8 conversions
against ml_dtypes, its ggml blocks against gguf's Python quantizers (both pinned in
scripts/python-requirements.txt), on values chosen to sit on and around every rounding
boundary, and on random rows of every magnitude."""

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

import kvfuzz

FP8 = [("fp8_e4m3fn", ml_dtypes.float8_e4m3fn), ("fp8_e5m2", ml_dtypes.float8_e5m2)]
BLOCKS = [
    ("q8_0", GGMLQuantizationType.Q8_0),
    ("q4_0", GGMLQuantizationType.Q4_0),
    ("q4_1", GGMLQuantizationType.Q4_1),
    ("q5_0", GGMLQuantizationType.Q5_0),
    ("q5_1", GGMLQuantizationType.Q5_1),
]


def boundary_values(dtype):
    """Every finite value of the fp8 dtype, every midpoint between neighbours (the ties) and
    the floats on either side of each midpoint, and random values of every magnitude."""
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    finite = np.unique(values[np.isfinite(values)])
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    rng = np.random.default_rng(7)
    magnitudes = np.exp2(rng.integers(-24, 18, 20000).astype(np.float32))
    random = (rng.standard_normal(20000).astype(np.float32) * magnitudes).astype(np.float32)
    tiny = np.array([0.0, -0.0, 1e-30, -1e-30, 2.0**-20, 2.0**-17, 2.0**-10], np.float32)
    return np.concatenate(
        [finite, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)), random, tiny]
    ).astype(np.float32)


@pytest.mark.parametrize("name,dtype", FP8)
def test_fp8_conversions_match_ml_dtypes_bit_for_bit(name, dtype):
    largest = float(ml_dtypes.finfo(dtype).max)
    x = boundary_values(dtype)
    x = x[np.abs(x) <= largest]  # ml_dtypes does not saturate: beyond, below
    ours = np.frombuffer(kvfuzz.quantize_row(name, x), dtype=np.uint8)
    theirs = x.astype(dtype).view(np.uint8)
    wrong = np.nonzero(ours != theirs)[0]
    assert wrong.size == 0, f"{name}: {wrong.size} of {x.size} differ, first {x[wrong[0]]!r}: {ours[wrong[0]]:#x} != {theirs[wrong[0]]:#x}"
    # Every code reads back as ml_dtypes reads it (NaN as NaN).
    codes = np.arange(256, dtype=np.uint8)
    back = kvfuzz.dequantize_row(name, codes.tobytes(), 256)
    want = codes.view(dtype).astype(np.float32)
    assert np.array_equal(back, want, equal_nan=True)


@pytest.mark.parametrize("name,dtype", FP8)
def test_fp8_saturates_and_divides_by_its_scale(name, dtype):
    largest = np.float32(ml_dtypes.finfo(dtype).max)
    big = np.array([largest * 1.5, -1e30, np.inf, -np.inf, np.nan], np.float32)
    back = kvfuzz.dequantize_row(name, kvfuzz.quantize_row(name, big), 5)
    assert list(back[:4]) == [largest, -largest, largest, -largest]
    assert np.isnan(back[4])
    # With a scale s: fp8(x / s) stored, fp8 * s read back, x / s in f32.
    x = boundary_values(dtype)[:4000] * np.float32(3)
    for scale in (0.25, 3.0, 0.1875):
        stored = np.frombuffer(kvfuzz.quantize_row(name, x, scale), dtype=np.uint8)
        divided = (x / np.float32(scale)).astype(np.float32)
        divided = np.clip(divided, -largest, largest)
        assert np.array_equal(stored, divided.astype(dtype).view(np.uint8))
        back = kvfuzz.dequantize_row(name, stored.tobytes(), x.size, scale)
        assert np.array_equal(back, (stored.view(dtype).astype(np.float32) * np.float32(scale)))


def block_rows():
    """Rows of 32k elements: random of every magnitude, integers and halves (the rounding
    ties), all zero, one nonzero element, all equal, a huge and a tiny block."""
    rng = np.random.default_rng(11)
    rows = []
    for scale in (1e-6, 1e-3, 0.5, 1.0, 7.0, 300.0, 6e4):
        rows.append((rng.standard_normal(256) * scale).astype(np.float32))
    rows.append(rng.integers(-16, 17, 256).astype(np.float32))
    rows.append((rng.integers(-40, 41, 256) / 2).astype(np.float32))
    rows.append(np.zeros(64, np.float32))
    one = np.zeros(32, np.float32)
    one[17] = -3.0
    rows.append(one)
    rows.append(np.full(32, 2.5, np.float32))
    rows.append(np.concatenate([np.full(32, -1e-7, np.float32), np.linspace(-8, 7, 32, dtype=np.float32)]))
    return rows


@pytest.mark.parametrize("name,qtype", BLOCKS)
def test_ggml_blocks_match_gguf_bit_for_bit(name, qtype):
    for row in block_rows():
        ours = kvfuzz.quantize_row(name, row)
        theirs = quants.quantize(row.reshape(1, -1), qtype).tobytes()
        assert ours == theirs, f"{name}: bytes differ on a row of {row.size} starting {row[:4]}"
        back = kvfuzz.dequantize_row(name, ours, row.size)
        want = quants.dequantize(np.frombuffer(theirs, np.uint8).reshape(1, -1), qtype).reshape(-1)
        assert np.array_equal(back, want.astype(np.float32))


def test_a_per_channel_group_reads_back_as_defined():
    # Channel 0 spans [0, 15] in channel_u4: scale 1, 3.3 reads 3, 2.5 ties to even (2);
    # channel 1 is constant: scale 0, read back as itself.
    keys = np.array([[0, -1], [3.3, -1], [2.5, -1], [15, -1]], np.float32)
    got = kvfuzz.quantize_group("channel_u4", keys)
    assert got.tolist() == [[0, -1], [3, -1], [2, -1], [15, -1]]
    with pytest.raises(ValueError, match="expected 'channel_u8' or 'channel_u4'"):
        kvfuzz.quantize_group("q8_0", keys)
    with pytest.raises(ValueError, match="quantizes a group of keys by channel"):
        kvfuzz.quantize_row("channel_u8", np.zeros(32, np.float32))


def test_formats_refuse_what_they_cannot_hold():
    with pytest.raises(ValueError, match="multiple of 32"):
        kvfuzz.quantize_row("q8_0", np.zeros(31, np.float32))
    with pytest.raises(ValueError, match="stores its own scales"):
        kvfuzz.quantize_row("q4_0", np.zeros(32, np.float32), 2.0)
    with pytest.raises(ValueError, match="expected one of fp8_e4m3fn"):
        kvfuzz.quantize_row("int8", np.zeros(32, np.float32))
    with pytest.raises(ValueError, match="expected 34 bytes"):
        kvfuzz.dequantize_row("q8_0", b"\0" * 33, 32)
    # The affine formats (MLX's groups): their group, whole rows, no scale, a known dtype,
    # finite values (a NaN has no quant).
    with pytest.raises(ValueError, match="group: expected 32, 64 or 128"):
        kvfuzz.quantize_row("affine4", np.zeros(96, np.float32), group=48)
    with pytest.raises(ValueError, match="multiple of its group \\(64\\)"):
        kvfuzz.quantize_row("affine4", np.zeros(96, np.float32))
    with pytest.raises(ValueError, match="stores its own scales"):
        kvfuzz.quantize_row("affine8", np.zeros(64, np.float32), 2.0)
    with pytest.raises(ValueError, match="dtype: expected 'f32', 'f16' or 'bf16'"):
        kvfuzz.quantize_row("affine8", np.zeros(64, np.float32), dtype="f64")
    with pytest.raises(ValueError, match="finite"):
        kvfuzz.quantize_row("affine2", np.full(32, np.nan, np.float32), group=32)
    assert len(kvfuzz.quantize_row("affine2", np.zeros(64, np.float32), group=32)) == 2 * (8 + 8)
