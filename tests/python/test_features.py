"""The attention features through the Python door: a numpy engine that declares them gets
their values in its config, passes their seeds and generated cases, and one that drops the
sink on its decode path is rejected by the sink's seed and by check."""

import os

import kvfuzz
from conftest import ROOT
from features_engine import (
    FeaturesEngine,
    Fp8VScaleDroppedEngine,
    LatentAtKeyEndEngine,
    LatentEngine,
    LatentFp8Engine,
    LatentFp8UnscaledEngine,
    MlaRopeAtFrontEngine,
    MlaRopePartEngine,
    QuantizedEngine,
    RopeHalfSplitOnlyEngine,
    RopePairsEngine,
    SinkPrefillOnlyEngine,
)
from numpy_engine import NumpyEngine

SEEDS = os.path.join(ROOT, "corpus", "seeds")
FEATURE_SEEDS = [
    "worked-example-sink.json",
    "softcap-split-decode.json",
    "alibi-gqa-slopes.json",
    "chunked-local-after-truncate.json",
]


NAMES = ("softcap", "sinks", "alibi", "chunked_local")


def test_the_features_are_declared_and_reach_the_config():
    declared = kvfuzz.engine(FeaturesEngine).declarations()["supports"]
    assert all(declared[name] for name in NAMES)
    plain = kvfuzz.engine(NumpyEngine).declarations()["supports"]
    assert not any(plain[name] for name in NAMES)


def test_an_engine_with_the_features_passes_their_seeds_and_generated_cases(tmp_path):
    for seed in FEATURE_SEEDS:
        result = kvfuzz.replay(os.path.join(SEEDS, seed), FeaturesEngine)
        assert result.passed, (seed, result)
    # About one case in six has each feature (generate/features.h): 60 cases reach all four.
    result = kvfuzz.check(FeaturesEngine, cases=60, seed=1, out=str(tmp_path / "out"))
    assert result.passed, result


def test_an_engine_without_them_skips_their_seeds():
    result = kvfuzz.replay(os.path.join(SEEDS, "worked-example-sink.json"), NumpyEngine)
    assert result.passed
    assert result.count("skip") == 1
    assert "attention sinks" in result.summary()


def test_the_sink_dropped_when_decoding_is_rejected(tmp_path):
    seed = os.path.join(SEEDS, "worked-example-sink.json")
    assert not kvfuzz.replay(seed, SinkPrefillOnlyEngine).passed
    result = kvfuzz.check(SinkPrefillOnlyEngine, cases=60, seed=1, out=str(tmp_path / "out"),
                          shrink_seconds=5)
    assert not result.passed


KV_SEEDS = ["worked-example-fp8-v.json", "q4_0-nibble-order.json", "affine-pack-order.json"]


def test_a_quantized_cache_gets_its_formats_and_passes_their_seeds_and_cases(tmp_path):
    declared = kvfuzz.engine(QuantizedEngine).declarations()["supports"]
    assert declared["kv_fp8"] and declared["kv_ggml_blocks"] and declared["kv_affine"]
    for seed in KV_SEEDS:
        result = kvfuzz.replay(os.path.join(SEEDS, seed), QuantizedEngine)
        assert result.passed and result.count("pass") == 1, (seed, result)
        # The plain numpy engine declares neither: skipped, with the reason.
        skipped = kvfuzz.replay(os.path.join(SEEDS, seed), NumpyEngine)
        assert skipped.count("skip") == 1 and "KV cache" in skipped.summary()
    # One case in four has a format (generate/kv_formats.h): 40 cases reach both families.
    result = kvfuzz.check(QuantizedEngine, cases=40, seed=1, out=str(tmp_path / "out"))
    assert result.passed, result


def test_the_v_scale_dropped_is_rejected(tmp_path):
    assert not kvfuzz.replay(os.path.join(SEEDS, "worked-example-fp8-v.json"),
                             Fp8VScaleDroppedEngine).passed
    # An engine that keeps V in f32 instead of fp8 fails the seed too: 12.6 against 12.4.
    assert not kvfuzz.replay(os.path.join(SEEDS, "worked-example-fp8-v.json"), type(
        "Unquantized", (FeaturesEngine,), {"supports": QuantizedEngine.supports})).passed
    result = kvfuzz.check(Fp8VScaleDroppedEngine, cases=60, seed=1, out=str(tmp_path / "out"),
                          shrink_seconds=5)
    assert not result.passed


def test_an_mla_cache_reads_values_from_keys_and_the_key_end_is_rejected(tmp_path):
    seed = os.path.join(SEEDS, "mla-latent-value.json")
    assert kvfuzz.engine(LatentEngine).declarations()["supports"]["value_from_key"]
    result = kvfuzz.replay(seed, LatentEngine)
    assert result.passed and result.count("pass") == 1, result
    skipped = kvfuzz.replay(seed, FeaturesEngine)
    assert skipped.count("skip") == 1 and "value read from its key" in skipped.summary()
    assert not kvfuzz.replay(seed, LatentAtKeyEndEngine).passed
    # About one case in eight without RoPE or a format has it (generate/features.h): 60
    # cases reach it.
    result = kvfuzz.check(LatentEngine, cases=60, seed=1, out=str(tmp_path / "out"))
    assert result.passed, result
    result = kvfuzz.check(LatentAtKeyEndEngine, cases=60, seed=1, out=str(tmp_path / "bad"),
                          shrink_seconds=5)
    assert not result.passed


def test_an_mla_cache_in_fp8_reads_its_latent_through_the_key_scale(tmp_path):
    # The MLA seed over an e4m3fn key cache at scale 0.5: its keys [2, 16], [4, 32], [8, 64]
    # are stored as 4, 32, 8, 64, 16, 128 (exact), so the rows stay 2, 3, 14/3; a value read
    # without the scale is twice the latent: 4, 6, 28/3.
    with open(os.path.join(SEEDS, "mla-latent-value.json")) as f:
        text = f.read()
    fixture = tmp_path / "mla-fp8.json"
    fixture.write_text(text.replace('"dtype": "f32"',
                                    '"dtype": "f32", "k_format": {"type": "fp8_e4m3fn", '
                                    '"scale": 0.5}'))
    result = kvfuzz.replay(str(fixture), LatentFp8Engine)
    assert result.passed and result.count("pass") == 1, result
    assert kvfuzz.replay(str(fixture), LatentEngine).count("skip") == 1  # no kv_fp8 declared
    assert not kvfuzz.replay(str(fixture), LatentFp8UnscaledEngine).passed
    # Generated cases: MLA over an fp8 or a block key cache in about one in twelve (MLA one
    # in four of those without RoPE, K in one of the formats about one in three).
    result = kvfuzz.check(LatentFp8Engine, cases=80, seed=1, out=str(tmp_path / "out"))
    assert result.passed, result
    result = kvfuzz.check(LatentFp8UnscaledEngine, cases=80, seed=1, out=str(tmp_path / "bad"),
                          shrink_seconds=5)
    assert not result.passed


def test_interleaved_rope_pairs_reach_the_config_and_half_split_ones_are_rejected(tmp_path):
    seed = os.path.join(SEEDS, "rope-interleaved-pairs.json")
    assert kvfuzz.engine(RopePairsEngine).declarations()["supports"]["rope_interleaved"]
    result = kvfuzz.replay(seed, RopePairsEngine)
    assert result.passed and result.count("pass") == 1, result
    skipped = kvfuzz.replay(seed, FeaturesEngine)
    assert skipped.count("skip") == 1 and "interleaved pairs" in skipped.summary()
    assert not kvfuzz.replay(seed, RopeHalfSplitOnlyEngine).passed
    # About one case in nine has them (a third of those with RoPE: generate/features.h): five
    # or so of 45 (90 before 2026-12-08; the half-split control fails within them).
    result = kvfuzz.check(RopePairsEngine, cases=45, seed=1, out=str(tmp_path / "out"))
    assert result.passed, result
    result = kvfuzz.check(RopeHalfSplitOnlyEngine, cases=45, seed=1, out=str(tmp_path / "bad"),
                          shrink_seconds=5)
    assert not result.passed



def test_mlas_rope_part_reaches_the_config_and_a_front_part_is_rejected(tmp_path):
    seed = os.path.join(SEEDS, "mla-rope-part.json")
    assert kvfuzz.engine(MlaRopePartEngine).declarations()["supports"]["rope_dims"]
    result = kvfuzz.replay(seed, MlaRopePartEngine)
    assert result.passed and result.count("pass") == 1, result
    skipped = kvfuzz.replay(seed, LatentEngine)
    assert skipped.count("skip") == 1 and "rope_dims" in skipped.summary(), skipped.summary()
    assert not kvfuzz.replay(seed, MlaRopeAtFrontEngine).passed
    # About one case with RoPE in four has a part (generate/features.h), and MLA's cases
    # with RoPE all do.
    result = kvfuzz.check(MlaRopePartEngine, cases=45, seed=1, out=str(tmp_path / "out"))
    assert result.passed, result
    result = kvfuzz.check(MlaRopeAtFrontEngine, cases=45, seed=1, out=str(tmp_path / "bad"),
                          shrink_seconds=5)
    assert not result.passed


def test_the_exec_door_hands_rope_style_on_and_half_split_by_default():
    from kvfuzz.exec_server import config_from_hello

    layout = {"q_heads": 1, "kv_heads": 1, "head_dim": 4, "value_dim": 1, "page_size": 16,
              "dtype": "f32", "scale": 1.0, "rope_theta": 100.0, "window": None}
    hello = {"layout": layout, "sequences": 1, "page_order": [0], "poison": "nan"}
    assert config_from_hello(hello).rope_style == "half_split"
    hello["layout"] = {**layout, "rope_style": "interleaved"}
    assert config_from_hello(hello).rope_style == "interleaved"
    assert config_from_hello(hello).rope_dims is None
    hello["layout"] = {**layout, "rope_dims": 2}
    assert config_from_hello(hello).rope_dims == 2
