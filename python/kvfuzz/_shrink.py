"""kvfuzz.shrink: a failing fixture or scenario reduced to a small one that fails the
same way (same property, same kind of divergence), as `kvfuzz shrink` does."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from kvfuzz import _kvfuzz
from kvfuzz._engines import EngineLike, engine
from kvfuzz._judge import check_properties


@dataclass
class ShrinkResult:
    scenario: _kvfuzz.Scenario  # the smallest failing scenario found
    signature: str  # what it keeps failing: "prefix/mismatch"
    failure: str
    report: str
    fixture: Optional[str]  # where it was saved, when `out` was given
    accepted: int
    tried: int
    timed_out: bool  # stopped by `seconds`
    out_of_candidates: bool  # stopped by `max_candidates`
    canonicalised: bool  # unused token entries dropped after the search (same failure)
    kept_input: bool  # every smaller scenario found was longer as a fixture: the input kept


def shrink(
    fixture_or_scenario: Union[str, "os.PathLike[str]", _kvfuzz.Scenario],
    engine_factory: EngineLike,
    property: Optional[str] = None,
    *,
    seconds: float = 60.0,
    max_candidates: int = 0,
    out: Optional[str] = None,
    name: Optional[str] = None,
    fork: bool = True,
    timeout: float = 600.0,
) -> Optional[ShrinkResult]:
    """Shrinks under `property` (default: the one the fixture records, else prefix).
    Returns None when the scenario passes that property (nothing to shrink). With `out`,
    the result is saved there as ENGINE-PROPERTY-KIND-HASH.json with its provenance. Each
    judgement runs in a child forked from this process (at most `timeout` seconds): a
    candidate that crashes or hangs the engine is another failure, and the shrink goes on;
    `fork=False` judges here (for a debugger). `max_candidates` (0: none) bounds the
    candidates judged, a budget that gives the same result on every machine; after the
    search the unused token-table entries are always dropped, and the result is never a
    longer fixture than the input."""
    if isinstance(fixture_or_scenario, _kvfuzz.Scenario):
        scenario = fixture_or_scenario
    else:
        scenario = _kvfuzz.Scenario.load(os.fspath(fixture_or_scenario))
    prop = check_properties([property or scenario.recorded_property])[0]
    eng = engine(engine_factory, name)
    why = eng.unjudgeable(scenario)
    if why is not None:
        raise ValueError(f"for {eng.name}, the fixture {why}; expected a fixture it can run")
    shrunk = _kvfuzz.shrink(
        scenario, eng, prop, seconds, fork=fork, timeout=timeout, max_candidates=max_candidates
    )
    if shrunk is None:
        return None
    small = shrunk.scenario
    outcome = shrunk.outcome
    small.name = _kvfuzz.failure_fixture_stem(eng.name, prop, outcome.kind or "", small)
    _kvfuzz.stamp_failure(small, "shrink", eng.name, prop, outcome.failure)
    path = None
    if out is not None:
        path = os.path.join(out, small.name + ".json")
        small.save(path)
    return ShrinkResult(
        scenario=small,
        signature=outcome.signature or prop,
        failure=outcome.failure,
        report=outcome.report,
        fixture=path,
        accepted=shrunk.accepted,
        tried=shrunk.tried,
        timed_out=shrunk.timed_out,
        out_of_candidates=shrunk.out_of_candidates,
        canonicalised=shrunk.canonicalised,
        kept_input=shrunk.kept_input,
    )
