"""kvfuzz.check: random scenarios against one engine, every property judged per case.

The loop runs in this process, case after case (generate, judge each property, on a
failure save the case, then shrink it). It is the one place that would hand cases to the
CLI's forked, crash-isolated case runner once that is merged (docs/python.md, "What is
missing"): a Python engine that crashes the interpreter (a segfault in an extension) ends
the run here."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from kvfuzz import _kvfuzz
from kvfuzz._engines import EngineLike, engine, factory_spec
from kvfuzz._judge import check_properties


@dataclass
class Finding:
    """One property the engine broke: the case that showed it and its shrunk form."""

    property: str
    signature: str  # "prefix/mismatch": property and kind of divergence
    case_index: int  # from 0
    case_seed: int  # kvfuzz.generate(case_seed, engine) makes the case again
    raw_fixture: str  # the failing case as generated, saved before shrinking
    fixture: Optional[str]  # the shrunk case (None when shrinking could not reproduce it)
    failure: str  # the first line of the report
    report: str  # the shrunk case's report (the raw one's when it did not shrink)
    replay_command: str

    def __str__(self) -> str:
        lines = [
            f"{self.signature} at case {self.case_index + 1} (case seed {self.case_seed})",
            f"  shrunk fixture: {self.fixture or '(not shrunk: ' + self.failure + ')'}",
            f"  raw fixture:    {self.raw_fixture}",
            f"  replay:         {self.replay_command}",
        ]
        lines += ["  " + line for line in self.report.rstrip("\n").split("\n")]
        return "\n".join(lines)


@dataclass
class CheckResult:
    engine: str
    seed: int
    properties: List[str]
    cases: int = 0  # cases run
    skipped: int = 0  # cases the engine cannot be given (unjudgeable)
    seconds: float = 0.0
    findings: List[Finding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        head = (
            f"kvfuzz check of {self.engine}: {self.cases} cases, seed {self.seed}, "
            f"properties {','.join(self.properties)}, {self.seconds:.1f} s"
        )
        if self.skipped:
            head += f" ({self.skipped} cases skipped: outside the engine's declarations)"
        if self.passed:
            return head + ": pass"
        broke = ", ".join(f.signature for f in self.findings)
        return "\n".join([head + f": FAIL ({broke})"] + [str(f) for f in self.findings])


def replay_command(path: str, factory) -> str:
    """The one line that replays `path` on the engine `factory` makes."""
    spec = factory_spec(factory)
    if spec is None:
        return f"kvfuzz.replay({path!r}, <your engine factory>)"
    return f"{os.path.basename(sys.executable)} -m kvfuzz replay {path} --engine {spec}"


def _save_and_shrink(
    eng, factory, scenario, prop, outcome, index, seed, out, shrink_seconds
) -> Finding:
    # The raw case first: whatever happens while shrinking, the failure is on disk.
    raw = scenario.copy()
    raw.name = _kvfuzz.check_fixture_stem(eng.name, seed) + "-" + prop
    _kvfuzz.stamp_failure(raw, "check", eng.name, prop, outcome.failure)
    raw_path = os.path.join(out, "raw", raw.name + ".json")
    raw.save(raw_path)
    shrunk = _kvfuzz.shrink(raw, eng, prop, shrink_seconds)
    path, report = None, outcome.report
    if shrunk is not None:
        small = shrunk.scenario
        small.name = _kvfuzz.failure_fixture_stem(eng.name, prop, shrunk.outcome.kind or "", small)
        small.note = (
            f"Shrunk by kvfuzz.check from {raw.ops} ops, {raw.tokens} tokens to {small.ops} ops, "
            f"{small.tokens} tokens ({shrunk.accepted} of {shrunk.tried} candidates accepted"
            f"{', stopped at the time budget' if shrunk.timed_out else ''}). Fails "
            f"{shrunk.outcome.signature} on {eng.name}: {shrunk.outcome.failure}"
        )
        _kvfuzz.stamp_failure(small, "shrink", eng.name, prop, shrunk.outcome.failure)
        path = os.path.join(out, small.name + ".json")
        small.save(path)
        report = shrunk.outcome.report
    return Finding(
        property=prop,
        signature=outcome.signature or prop,
        case_index=index,
        case_seed=seed,
        raw_fixture=raw_path,
        fixture=path,
        failure=outcome.failure,
        report=report,
        replay_command=replay_command(path or raw_path, factory),
    )


def check(
    engine_factory: EngineLike,
    cases: int = 100,
    seed: int = 1,
    properties=None,
    out: str = "kvfuzz-out",
    *,
    max_tokens: int = 0,
    max_head_dim: int = 0,
    max_q_heads: int = 0,
    shrink_seconds: float = 30.0,
    name: Optional[str] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> CheckResult:
    """Runs `cases` generated scenarios on the engine `engine_factory` makes, judging every
    property of `properties` (default: all six) on each. Case i is generated from
    kvfuzz.case_seed(seed, i) within the engine's declarations (optional operations,
    supports), as `kvfuzz check --seed` draws them. A property's first failure is saved to
    OUT/raw/ at once, then shrunk (at most `shrink_seconds`) to OUT/; that property is not
    judged again, the others go on. `max_*` cap the generated sizes (0: the generator's own;
    max_tokens above 160 makes long contexts). Returns a CheckResult; its `findings` name
    property, signature, case seed, fixture path, report and the replay command."""
    if cases < 1:
        raise ValueError(f"cases: expected a positive number of cases, got {cases}")
    props = check_properties(properties)
    eng = engine(engine_factory, name)
    eng.declarations()  # an engine that cannot be made, or declares nonsense, fails here
    result = CheckResult(engine=eng.name, seed=seed, properties=props)
    failed = set()
    start = time.monotonic()
    for index in range(cases):
        if len(failed) == len(props):
            break
        case_seed = _kvfuzz.case_seed(seed, index)
        scenario = _kvfuzz.generate(
            case_seed, eng, max_tokens=max_tokens, max_head_dim=max_head_dim, max_q_heads=max_q_heads
        )
        result.cases += 1
        if eng.unjudgeable(scenario) is not None:
            result.skipped += 1
            continue
        for prop in props:
            if prop in failed:
                continue
            outcome = _kvfuzz.judge(prop, scenario, eng)
            if outcome.passed:
                continue
            failed.add(prop)
            result.findings.append(
                _save_and_shrink(
                    eng, engine_factory, scenario, prop, outcome, index, case_seed, out, shrink_seconds
                )
            )
        if progress is not None:
            progress(index + 1, cases)
    result.seconds = time.monotonic() - start
    return result
