"""The one generator: a scenario from a seed, within an engine's declarations."""

from __future__ import annotations

from typing import Optional

from kvfuzz import _kvfuzz
from kvfuzz._engines import EngineLike, engine


def generate(
    seed: int,
    engine_factory: Optional[EngineLike] = None,
    *,
    max_tokens: int = 0,
    max_head_dim: int = 0,
    max_q_heads: int = 0,
    max_sequences: int = 0,
    max_ops: int = 0,
) -> _kvfuzz.Scenario:
    """The scenario the seed draws (the same on every machine). With an engine, only what it
    announces (truncate, fork) and supports (dtypes, head dims, heads, context) is drawn,
    as kvfuzz.check does; `max_*` cap the sizes (0: the generator's own; max_tokens above 160
    makes long contexts). kvfuzz.check's case i is generate(case_seed(seed, i), engine)."""
    eng = engine(engine_factory) if engine_factory is not None else None
    return _kvfuzz.generate(
        seed,
        eng,
        max_tokens=max_tokens,
        max_head_dim=max_head_dim,
        max_q_heads=max_q_heads,
        max_sequences=max_sequences,
        max_ops=max_ops,
    )
