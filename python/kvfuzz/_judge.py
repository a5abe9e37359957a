"""The six properties and the reference, as the harness defines them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy

from kvfuzz import _kvfuzz
from kvfuzz._engines import EngineLike, engine

# The properties' names in the harness's order, and what each claims.
PROPERTIES: List[str] = [name for name, _ in _kvfuzz.properties()]
CLAIMS = dict(_kvfuzz.properties())


@dataclass(frozen=True)
class ReferenceRow:
    """A row of full-prefix attention in double precision, keyed by (seq, epoch, pos)."""

    seq: int
    epoch: int
    pos: int
    key_lo: int  # the keys it sees: positions key_lo .. key_hi
    key_hi: int
    values: numpy.ndarray  # [q_head, value_dim], float64
    bound: numpy.ndarray  # [q_head]: the tolerance an engine's row is judged by


def reference(scenario: _kvfuzz.Scenario) -> List[ReferenceRow]:
    """Every row the scenario's program implies, in program order."""
    return [ReferenceRow(*row) for row in _kvfuzz.reference(scenario)]


def judge(scenario: _kvfuzz.Scenario, engine_factory: EngineLike, property: str = "prefix"):
    """One property of one scenario on an engine: an Outcome with `passed`, `signature`
    ("prefix/mismatch"), `kind`, `failure` (one line) and `report` (several)."""
    return _kvfuzz.judge(property, scenario, engine(engine_factory))


def check_properties(properties) -> List[str]:
    """`properties` (None: all six) as a list of known names; ValueError names a wrong one."""
    if properties is None:
        return list(PROPERTIES)
    if isinstance(properties, str):
        properties = [p for p in properties.split(",") if p]
    for p in properties:
        if p not in PROPERTIES:
            raise ValueError(f"properties: expected names from {', '.join(PROPERTIES)}, got {p!r}")
    if not properties:
        raise ValueError("properties: expected at least one property")
    return list(properties)


def explain(
    scenario: _kvfuzz.Scenario, engine_factory: EngineLike, property: Optional[str] = None
) -> str:
    """What `kvfuzz explain` prints for the engine: whether it passes, then for prefix one
    line per row (its key, the keys it sees, expected and got) or, for a model scenario, the
    first diverging logits row; for another property (default: the one the fixture records
    it fails, else prefix) the first row a variant changes, with both values."""
    if property is not None and property not in PROPERTIES:
        raise ValueError(f"property: expected one of {', '.join(PROPERTIES)}, got {property!r}")
    return _kvfuzz.explain(scenario, engine(engine_factory), property)
