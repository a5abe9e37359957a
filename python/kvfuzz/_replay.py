"""kvfuzz.replay: fixtures (a file or every *.json below a folder) on one engine, judged
as `kvfuzz replay` judges them: the fixture's own `expect` rows against the reference,
then prefix, then the property a regression was shrunk under."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from kvfuzz import _kvfuzz
from kvfuzz._corpus import PathLike, fixtures
from kvfuzz._engines import EngineLike, engine


@dataclass
class FixtureResult:
    path: str
    status: str  # "pass", "fail" (a mismatch), "bad" (a malformed fixture) or "skip"
    report: str = ""  # why it failed, was bad or was skipped


@dataclass
class ReplayResult:
    engine: str
    fixtures: List[FixtureResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for f in self.fixtures if f.status == status)

    @property
    def passed(self) -> bool:
        """Every fixture passed or was skipped; none failed or was malformed."""
        return all(f.status in ("pass", "skip") for f in self.fixtures)

    def summary(self) -> str:
        lines = [
            f"kvfuzz replay on {self.engine}: {len(self.fixtures)} fixtures, "
            f"{self.count('pass')} passed, {self.count('fail')} failed, {self.count('bad')} bad, "
            f"{self.count('skip')} skipped"
        ]
        for f in self.fixtures:
            if f.status != "pass":
                lines.append(f"{f.status.upper():4} {f.path}")
                lines += ["    " + line for line in f.report.rstrip("\n").split("\n") if line]
        return "\n".join(lines)


def replay_one(
    path: str,
    eng: _kvfuzz.Engine,
    scenario: Optional[_kvfuzz.Scenario] = None,
    *,
    fork: bool = True,
    timeout: float = 600.0,
) -> FixtureResult:
    if scenario is None:
        try:
            scenario = _kvfuzz.Scenario.load(path)
        except _kvfuzz.FixtureError as error:
            return FixtureResult(path, "bad", str(error))
    # One order of checks for every door (kvfuzz/orchestrate.h's replay_fixture): the
    # fixture's expect rows, the engine's declarations, prefix, the recorded property.
    status, detail = _kvfuzz.replay_fixture(scenario, eng, fork=fork, timeout=timeout)
    if status == "wrong-expect":
        return FixtureResult(path, "fail", "the reference disagrees with the fixture's expect rows: " + detail)
    if status == "skip":
        return FixtureResult(path, "skip", f"{eng.name}: the fixture {detail}")
    if status in ("fail", "crash"):  # a crash, an exit or a hang of the engine in its child
        return FixtureResult(path, "fail", detail)
    return FixtureResult(path, "pass")


def replay(
    path,
    engine_factory: EngineLike,
    *,
    name: Optional[str] = None,
    fork: bool = True,
    timeout: float = 600.0,
) -> ReplayResult:
    """Replays a fixture file, every fixture below a folder, or a kvfuzz.Scenario, on the
    engine `engine_factory` makes. ReplayResult.passed is False when any fixture failed
    (a wrong row, expect rows the reference disagrees with, or the engine crashing, exiting
    or taking longer than `timeout` seconds) or was malformed. Each fixture is replayed in
    a child forked from this process, so a crash ends only the child; `fork=False` replays
    here (for a debugger)."""
    eng = engine(engine_factory, name)
    result = ReplayResult(engine=eng.name)
    if isinstance(path, _kvfuzz.Scenario):
        result.fixtures.append(replay_one(path.name or "<scenario>", eng, path, fork=fork, timeout=timeout))
        return result
    for file in fixtures(path):
        result.fixtures.append(replay_one(file, eng, fork=fork, timeout=timeout))
    return result
