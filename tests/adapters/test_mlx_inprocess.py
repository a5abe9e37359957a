"""The MLX adapters in-process, through the kvfuzz Python package: the engine classes the
exec door serves, handed to kvfuzz.check as factories (numpy rows, no JSON). The honest
attention engine passes all six properties, and so does the llama model at model level; sinks given to the wrong q heads are caught on a row; a fork
copies the cache (KVCache's buffer, RotatingKVCache's ring and write index), so writing
into the fork leaves its source as it was."""

import os
import sys

import kvfuzz
import numpy as np

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
