"""The MLX adapters in-process, through the kvfuzz Python package: the engine classes the
exec door serves, handed to kvfuzz.check as factories (numpy rows, no JSON). The honest
attention engine passes all six properties, and so does the llama model at model level; sinks
given to the wrong q heads are caught on a row; a fork copies the cache (KVCache's buffer,
RotatingKVCache's ring and write index, QuantizedKVCache's words, scales and biases), so
writing into the fork leaves its source as it was. kvfuzz's affine formats store exactly the
bytes mx.quantize stores and read back exactly what mx.quantized_matmul reads."""

import os
import sys

import kvfuzz
import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "adapters", "mlx"))

import mlx_model_engine  # noqa: E402
import mlx_sdpa_engine  # noqa: E402

CASES = int(os.environ.get("KVFUZZ_MLX_INPROCESS_CASES", "40"))


def test_honest_engine_passes(tmp_path):
    result = kvfuzz.check(mlx_sdpa_engine.factory([]), cases=CASES, seed=3, out=str(tmp_path), jobs=2)
    assert result.passed, result.summary()
    assert result.cases == CASES, result.summary()


def test_the_llama_model_passes_at_model_level(tmp_path):
    result = kvfuzz.check(mlx_model_engine.factory([]), cases=10, seed=3, out=str(tmp_path), jobs=2)
    assert result.passed, result.summary()
    assert result.cases == 10, result.summary()


def test_sinks_of_the_wrong_heads_are_caught_on_a_row(tmp_path):
    result = kvfuzz.check(
        mlx_sdpa_engine.factory(["--bug", "sinks"]), cases=60, seed=1, out=str(tmp_path), jobs=2, shrink_seconds=5
    )
    assert not result.passed, result.summary()
    signatures = {finding.signature for finding in result.findings}
    assert signatures and all(s.endswith("/mismatch") for s in signatures), signatures


def test_a_fork_does_not_share_its_sources_buffer():
    from mlx_lm.models.cache import KVCache

    import mlx.core as mx

    source = KVCache()
    source.update_and_fetch(mx.ones((1, 1, 2, 4)), mx.ones((1, 1, 2, 4)))
    fork = mlx_sdpa_engine.copy_cache(source)
    fork.update_and_fetch(mx.full((1, 1, 1, 4), 7.0), mx.full((1, 1, 1, 4), 7.0))
    source.update_and_fetch(mx.full((1, 1, 1, 4), 3.0), mx.full((1, 1, 1, 4), 3.0))
    keys, _ = fork.keys_and_values()
    assert np.array(keys)[0, 0, :, 0].tolist() == [1.0, 1.0, 7.0]
    keys, _ = source.keys_and_values()
    assert np.array(keys)[0, 0, :, 0].tolist() == [1.0, 1.0, 3.0]


def test_a_forked_ring_keeps_its_write_index_and_its_own_buffer():
    from mlx_lm.models.cache import RotatingKVCache

    import mlx.core as mx

    source = RotatingKVCache(max_size=3)
    for value in (1.0, 2.0, 3.0, 4.0):  # one-token decodes: the fourth wraps the ring
        source.update_and_fetch(mx.full((1, 1, 1, 2), value), mx.full((1, 1, 1, 2), value))
    fork = mlx_sdpa_engine.copy_cache(source)
    assert (fork.offset, fork._idx, fork.max_size) == (source.offset, source._idx, source.max_size)
    fork.update_and_fetch(mx.full((1, 1, 1, 2), 7.0), mx.full((1, 1, 1, 2), 7.0))
    source.update_and_fetch(mx.full((1, 1, 1, 2), 5.0), mx.full((1, 1, 1, 2), 5.0))
    assert sorted(np.array(fork.keys)[0, 0, :, 0].tolist()) == [3.0, 4.0, 7.0]
    assert sorted(np.array(source.keys)[0, 0, :, 0].tolist()) == [3.0, 4.0, 5.0]


AFFINE = {"affine2": 2, "affine4": 4, "affine8": 8}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("name", sorted(AFFINE))
def test_the_affine_formats_are_mlx_quantize_bit_for_bit(name, dtype):
    import mlx.core as mx

    np_dtype = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    mx_dtype = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}[dtype]
    rng = np.random.default_rng(AFFINE[name])
    bits = AFFINE[name]
    for trial in range(60):
        group = (32, 64, 128)[trial % 3]
        n = 2 * group
        x = rng.standard_normal(n) * 2.0 ** rng.integers(-6, 6)
        if trial % 4 == 0:
            x = np.round(x * 4) / 4  # ties of rint
        if trial % 10 == 1:
            x[:] = x[0]  # a constant group: the 1e-7 scale floor
        row = x.astype(np_dtype).astype(np.float32)
        words, scales, biases = mx.quantize(mx.array(row).astype(mx_dtype)[None], group_size=group, bits=bits)
        ours = kvfuzz.quantize_row(name, row, group=group, dtype=dtype)
        per_group = 8 + group * bits // 8
        for g in range(2):
            chunk = ours[g * per_group : (g + 1) * per_group]
            scale, bias = np.frombuffer(chunk[:8], dtype="<f4")
            assert scale == np.float32(np.array(scales.astype(mx.float32))[0, g]), (trial, g)
            assert bias == np.float32(np.array(biases.astype(mx.float32))[0, g]), (trial, g)
            theirs = np.array(words)[0, g * group * bits // 32 : (g + 1) * group * bits // 32]
            assert chunk[8:] == theirs.astype("<u4").tobytes(), (trial, g)
        # Read back as quantized_matmul reads it: a one-hot query row per element.
        back = kvfuzz.dequantize_row(name, ours, n, group=group)
        eye = mx.eye(n, dtype=mx.float32)
        read = mx.quantized_matmul(
            eye, words, scales.astype(mx.float32), biases.astype(mx.float32), transpose=True, group_size=group, bits=bits
        )
        assert np.array_equal(back, np.array(read).reshape(-1)), trial


def test_the_quantized_cache_passes_and_a_fork_copies_its_words_scales_and_biases(tmp_path):
    # Not every case gets a format (one in four of those that could hold one): the exec
    # tests force them (tests/adapters/mlx_tests.cmake), with the control that reads another
    # bit width; this is the in-process door's run.
    # fork=False: the tests above ran MLX in this process, and a worker forked after MLX
    # started its threads waits forever on a lock one of them held (seen: a 600 s hang).
    result = kvfuzz.check(mlx_sdpa_engine.factory(["--cache", "quantized"]), cases=CASES, seed=5,
                          out=str(tmp_path / "honest"), fork=False)
    assert result.passed, result.summary()
    fork = mlx_sdpa_engine.copy_cache
    from mlx_lm.models.cache import QuantizedKVCache

    import mlx.core as mx

    source = QuantizedKVCache(group_size=32, bits=4)
    source.update_and_fetch(mx.ones((1, 1, 2, 32)), mx.ones((1, 1, 2, 32)))
    copy = fork(source)
    copy.update_and_fetch(mx.full((1, 1, 1, 32), 7.0), mx.full((1, 1, 1, 32), 7.0))
    source.update_and_fetch(mx.full((1, 1, 1, 32), 3.0), mx.full((1, 1, 1, 32), 3.0))
    biases = [np.array(c.keys_and_values()[0][2])[0, 0, :, 0].tolist() for c in (copy, source)]
    assert biases == [[1.0, 1.0, 7.0], [1.0, 1.0, 3.0]]
