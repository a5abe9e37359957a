"""kvfuzz in-process: the harness's generator, reference, six properties, shrinker,
replay and corpus for an attention engine written in Python (docs/python.md).

    import kvfuzz

    class MyEngine:
        def __init__(self, config): ...          # a kvfuzz.EngineConfig
        def step(self, chunks): ...              # -> [(positions, out), ...], one per chunk
        def reset(self, seq): ...
        def truncate(self, seq, keep): ...       # optional
        def fork(self, src, dst): ...            # optional

    result = kvfuzz.check(MyEngine, cases=100)
    assert result.passed, result.summary()

A whole model (ids in, logits out) is a class with `whole_model = True`, made with a
kvfuzz.ModelEngineConfig (config.weights() are the model's weights) and given
kvfuzz.ModelChunk (seq, ids); it is judged at model level against the double full-prefix
logits.

In pytest, the `kvfuzz_check` fixture does the same and fails with the shrunk fixture's
path and the command that replays it.
"""

from kvfuzz._kvfuzz import (
    Chunk,
    EngineConfig,
    EngineError,
    FixtureError,
    ModelChunk,
    ModelConfig,
    ModelEngineConfig,
    Scenario,
    __version__,
    case_seed,
    dequantize_row,
    quantize_group,
    quantize_row,
)
from kvfuzz._check import CheckResult, Finding, KnownBug, check, root_cause_hash
from kvfuzz._corpus import corpus_path, fixtures, load_fixture, save_fixture
from kvfuzz._engines import builtin_engine, builtin_engines, engine, load_factory
from kvfuzz._generate import generate
from kvfuzz._judge import CLAIMS, PROPERTIES, ReferenceRow, explain, judge, reference
from kvfuzz._replay import FixtureResult, ReplayResult, replay
from kvfuzz._shrink import ShrinkResult, shrink

__all__ = [
    "CLAIMS",
    "PROPERTIES",
    "CheckResult",
    "Chunk",
    "EngineConfig",
    "EngineError",
    "Finding",
    "FixtureError",
    "FixtureResult",
    "KnownBug",
    "ModelChunk",
    "ModelConfig",
    "ModelEngineConfig",
    "ReferenceRow",
    "ReplayResult",
    "Scenario",
    "ShrinkResult",
    "__version__",
    "builtin_engine",
    "builtin_engines",
    "case_seed",
    "check",
    "corpus_path",
    "dequantize_row",
    "engine",
    "explain",
    "fixtures",
    "generate",
    "judge",
    "load_factory",
    "load_fixture",
    "quantize_group",
    "quantize_row",
    "reference",
    "replay",
    "root_cause_hash",
    "save_fixture",
    "shrink",
]
