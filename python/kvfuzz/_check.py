"""kvfuzz.check: random scenarios against one engine, every property judged per case.

The cases run on the check stage of the kvfuzz command (run_check_plan, kvfuzz/check.h):
by default each in a worker process forked from this one (`jobs` of them, results the same
for every number), so that a Python engine that crashes the interpreter (a segfault in an
extension, os.abort(), a CUDA error that aborts) or hangs past `timeout` becomes a finding
with its case on disk, and this process goes on. Property failures are then shrunk here,
in this process, after the plan; a crash or an exit is shrunk with every candidate judged
in a child forked from this process (judging them here would crash it); a timeout is
reported with its raw fixture and case seed, not shrunk."""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional

from kvfuzz import _kvfuzz
from kvfuzz._engines import EngineLike, engine, factory_spec
from kvfuzz._judge import check_properties
from kvfuzz._replay import replay_one


@dataclass
class Finding:
    """One thing that went wrong, with the case that showed it: a property the engine broke,
    or a crash, an exit, a timeout of its worker (`crashed`); shrunk but for a timeout."""

    property: Optional[str]  # None for a crash, an exit, a timeout or an engine error outside a run
    signature: str  # "prefix/mismatch", "crash/SIGSEGV", "exit/3", "timeout", "engine-error"
    case_index: int  # from 0
    case_seed: int  # kvfuzz.generate(case_seed, engine) makes the case again
    raw_fixture: str  # the failing case as generated, saved before anything else
    fixture: Optional[str]  # the shrunk case (None when not shrunk, or not reproduced)
    failure: str  # the first line of the report
    report: str  # the shrunk case's report (the raw one's when it did not shrink)
    replay_command: str
    rerun_command: str = ""  # re-runs exactly this case through check (its own workers)
    duplicates: int = 0  # later cases with the same signature
    # Findings of this run (other signatures, other properties) whose cases shrank to the same
    # fixture: the same root cause, seen again; their signatures.
    same_cause: List[str] = field(default_factory=list)

    @property
    def crashed(self) -> bool:
        return self.property is None

    def __str__(self) -> str:
        head = f"{self.signature} at case {self.case_index + 1} (case seed {self.case_seed})"
        if self.duplicates:
            head += f", {self.duplicates} later duplicate{'s' if self.duplicates > 1 else ''}"
        if self.same_cause:
            head += f", the same shrunk case as {', '.join(self.same_cause)}"
        if self.fixture:
            shrunk = self.fixture
        elif self.signature == "timeout":
            shrunk = "(not shrunk: a timeout is not judged again)"
        else:
            shrunk = "(not shrunk: " + self.failure + ")"
        lines = [
            head,
            f"  shrunk fixture: {shrunk}",
            f"  raw fixture:    {self.raw_fixture}",
            f"  replay:         {self.replay_command}",
        ]
        if self.rerun_command:
            lines.append(f"  rerun:          {self.rerun_command}")
        lines += ["  " + line for line in self.report.rstrip("\n").split("\n")]
        return "\n".join(lines)


@dataclass
class KnownBug:
    """A fixture of `known`: a bug set aside while the run looks for others."""

    fixture: str  # the fixture's path
    root_cause: str  # root_cause_hash of it
    still_failing: bool  # it fails on the engine now ("known, still failing"), or passes
    seen: int = 0  # this run's findings that shrank to it
    line: str = ""  # "known, still failing: PATH, found again N times", as the command says it

    def __str__(self) -> str:
        return self.line


def root_cause_hash(fixture: str) -> str:
    """What two failures share when they are one bug: the hash of a shrunk fixture's
    scenario without its name, note and provenance (its case seed included): the
    scenario's `hash`, the one kvfuzz check --known compares too."""
    return _kvfuzz.Scenario.load(os.fspath(fixture)).hash


def _known_paths(known) -> List[str]:
    """`known` (one path, or an iterable of them) as a list of strings."""
    entries = [known] if isinstance(known, (str, os.PathLike)) else list(known)
    return [os.fspath(entry) for entry in entries]


@dataclass
class CheckResult:
    engine: str
    seed: int
    properties: List[str]
    cases: int = 0  # cases run (judged or skipped)
    skipped: int = 0  # cases the engine cannot be given (unjudgeable)
    rows: int = 0  # prefix's rows compared with the reference
    unjudged: int = 0  # of them, rows only checked to be finite (docs/check.md)
    # The largest share of its arithmetic bound a judged value used (docs/check.md, "bound"):
    # how close the engine came to failing prefix.
    bound_used: float = 0.0
    seconds: float = 0.0
    findings: List[Finding] = field(default_factory=list)
    crashes: int = 0  # cases that ended in a crash, an exit, a timeout or an engine error
    ignored: List[str] = field(default_factory=list)  # signatures found and set aside (`ignore`)
    known: List[KnownBug] = field(default_factory=list)  # the fixtures of `known`, replayed

    @property
    def passed(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        head = (
            f"kvfuzz check of {self.engine}: {self.cases} cases, seed {self.seed}, "
            f"properties {','.join(self.properties)}, {self.seconds:.1f} s, {self.rows} rows "
            f"({self.unjudged} unjudged), bound used {self.bound_used:.3f}"
        )
        if self.skipped:
            head += f" ({self.skipped} cases skipped: outside the engine's declarations)"
        if self.ignored:
            head += f" (ignored: {', '.join(self.ignored)})"
        known = [str(k) for k in self.known]
        if self.passed:
            return "\n".join([head + ": pass"] + known)
        broke = ", ".join(f.signature for f in self.findings)
        return "\n".join([head + f": FAIL ({broke})"] + known + [str(f) for f in self.findings])


def shell_command(*words: str) -> str:
    """A command line that runs as printed from any folder and shell: the interpreter that
    runs kvfuzz now (its absolute path, so that its packages come along, kvfuzz's included,
    whatever PATH and the virtual environment are there), then `-m kvfuzz` and the words,
    each quoted for a POSIX shell."""
    return " ".join(shlex.quote(word) for word in (sys.executable, "-m", "kvfuzz") + words)


def replay_command(path: str, factory) -> str:
    """The one line that replays `path` on the engine `factory` makes."""
    spec = factory_spec(factory)
    if spec is None:
        return f"kvfuzz.replay({path!r}, <your engine factory>)"
    return shell_command("replay", os.path.abspath(path), "--engine", spec)


def rerun_command(seed: int, factory, properties: List[str], max_tokens: int, timeout: float) -> str:
    """The one line that runs exactly the case of `seed` through check again."""
    spec = factory_spec(factory)
    if spec is None:
        return f"kvfuzz.check(<your engine factory>, case_seed={seed})"
    words = ["check", "--engine", spec, "--case-seed", str(seed)]
    if properties != check_properties(None):
        words += ["--property", ",".join(properties)]
    if max_tokens:
        words += ["--max-tokens", str(max_tokens)]
    if timeout != 600:
        words += ["--timeout", f"{timeout:g}"]
    return shell_command(*words)


def _shrunk(eng, raw_path: str, prop: str, out: str, shrink_seconds: float):
    """The shrunk form of a property's failing case, saved to OUT: (path, report) or None."""
    raw = _kvfuzz.Scenario.load(raw_path)
    shrunk = _kvfuzz.shrink(raw, eng, prop, shrink_seconds)
    if shrunk is None:
        return None
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
    return path, shrunk.outcome.report


def _shrunk_crash(eng, raw_path: str, found, props, out: str, shrink_seconds, timeout):
    """The shrunk form of a crash's or an exit's case, each candidate judged in a forked
    child: (path, None) or None. The report stays the raw case's (the children's output is
    dropped)."""
    raw = _kvfuzz.Scenario.load(raw_path)
    per_candidate = min(float(timeout), max(1.0, float(shrink_seconds)))
    shrunk = _kvfuzz.shrink_crash(
        raw, eng, found.signature, props, shrink_seconds, per_candidate, found.line
    )
    if shrunk is None:
        return None
    small = shrunk.scenario
    small.note = (
        f"Shrunk by kvfuzz.check from {raw.ops} ops, {raw.tokens} tokens to {small.ops} ops, "
        f"{small.tokens} tokens ({shrunk.accepted} of {shrunk.tried} candidates accepted, each "
        f"judged in a forked child{', stopped at the time budget' if shrunk.timed_out else ''}). "
        f"Ends as {found.signature} on {eng.name}: {found.line}"
    )
    path = os.path.join(out, small.name + ".json")
    small.save(path)
    return path


def _positive(what: str, value, types=(int,)) -> None:
    """ValueError naming `what` unless `value` is a positive number of one of `types`."""
    if isinstance(value, bool) or not isinstance(value, types) or value <= 0:
        raise ValueError(f"{what}: expected a positive number, got {value!r}")


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
    jobs: int = 1,
    fork: bool = True,
    timeout: float = 600.0,
    max_failures: Optional[int] = None,
    ignore: Iterable[str] = (),
    case_seed: Optional[int] = None,
    known: Iterable[str] = (),
) -> CheckResult:
    """Runs `cases` generated scenarios on the engine `engine_factory` makes, judging every
    property of `properties` (default: all six) on each. Case i is generated from
    kvfuzz.case_seed(seed, i) within the engine's declarations (optional operations,
    supports), as `kvfuzz check --seed` draws them; `case_seed` runs exactly that one case.

    Each case runs in a worker forked from this process (`jobs` workers; results are the
    same for every number); a crash, an exit or a case that takes longer than `timeout`
    seconds kills only its worker and is a finding. `fork=False` runs them here, without
    isolation or timeout (for a debugger). A finding's case is saved to OUT/raw/ at once;
    a property's failure is then shrunk here (at most `shrink_seconds`) to OUT/, a crash or
    an exit too, each candidate judged in a forked child (a timeout is not shrunk). After
    `max_failures` distinct signatures (default: one per chosen property) the engine is not
    run on later cases; later findings of a signature already seen count as duplicates;
    signatures in `ignore` are set aside. Findings are then grouped by root cause: two
    (of different signatures or properties) whose cases shrink to the same fixture are one
    finding (`same_cause`). `known` (fixture files or folders of them: bugs already filed)
    are replayed first, each reported as "known, still failing" or "known, now passing"; a
    finding that shrinks to one of them is set aside (counted in its `seen`), and each known
    bug still failing adds one per chosen property to `max_failures` (it may show through
    each), so the run goes on looking for others.
    `progress(cases_done, cases_total)` is called about
    every two seconds and at the end. `max_*` cap the generated sizes (0: the generator's own;
    max_tokens above 160 makes long contexts). Returns a CheckResult; its `findings` name
    property, signature, case seed, fixture paths, report and the replay command."""
    if case_seed is None:
        _positive("cases", cases)
    _positive("jobs", jobs)
    _positive("timeout", timeout, (int, float))
    if max_failures is not None:
        _positive("max_failures", max_failures)
    ignore = [ignore] if isinstance(ignore, str) else list(ignore)
    props = check_properties(properties)
    eng = engine(engine_factory, name)
    eng.declarations(fork=bool(fork))  # an engine that cannot be made, or declares nonsense, fails here
    seeds = [case_seed] if case_seed is not None else [_kvfuzz.case_seed(seed, i) for i in range(cases)]
    result = CheckResult(engine=eng.name, seed=seed, properties=props)
    start = time.monotonic()
    # Known bugs and root causes are settled as `kvfuzz check --known` settles them
    # (kvfuzz/root_causes.h); replaying and shrinking are this door's.
    causes = _kvfuzz.RootCauses(_known_paths(known))
    for index, bug in enumerate(causes.known):
        replayed = replay_one(bug.fixture, eng, fork=bool(fork), timeout=float(timeout))
        if replayed.status == "bad":
            raise ValueError(f"known: {bug.fixture}: {replayed.report}")
        if replayed.status != "skip":
            causes.mark_judged(index)
        if replayed.status == "fail":
            causes.mark_still_failing(index)
    run = _kvfuzz.run_check(
        eng,
        seeds,
        props,
        os.path.join(out, "raw"),
        jobs=jobs,
        fork=bool(fork),
        timeout=float(timeout),
        max_failures=(max_failures or len(props)) + causes.room(len(props)),
        ignore=ignore,
        max_tokens=max_tokens,
        max_head_dim=max_head_dim,
        max_q_heads=max_q_heads,
        on_progress=None if progress is None else lambda done, total, found: progress(done, total),
    )
    result.cases = run.cases + run.skipped
    result.skipped = run.skipped
    result.rows, result.unjudged, result.bound_used = run.rows, run.unjudged, run.bound_used
    result.crashes = run.crashes
    if progress is not None:
        progress(result.cases, len(seeds))
    kept = {}  # a finding's id for RootCauses.settle: the finding
    for found in run.findings:
        if found.ignored:
            result.ignored.append(found.signature)
            continue
        finding = Finding(
            property=found.property,
            signature=found.signature,
            case_index=found.case_number - 1,
            case_seed=found.seed,
            raw_fixture=found.fixture,
            fixture=None,
            failure=found.line,
            report=found.report,
            replay_command=replay_command(found.fixture, engine_factory),
            rerun_command=rerun_command(found.seed, engine_factory, props, max_tokens, timeout),
            duplicates=found.duplicates,
        )
        if found.property is not None:
            shrunk = _shrunk(eng, found.fixture, found.property, out, shrink_seconds)
            if shrunk is not None:
                finding.fixture, finding.report = shrunk
        elif found.signature.startswith(("crash/", "exit/")) and shrink_seconds > 0:
            finding.fixture = _shrunk_crash(
                eng, found.fixture, found, props, out, shrink_seconds, timeout
            )
        if finding.fixture:
            finding.replay_command = replay_command(finding.fixture, engine_factory)
            kind, first = causes.settle(eng.name, finding.fixture, len(kept), 1 + finding.duplicates)
            if kind == "known":
                continue
            if kind == "same":
                kept[first].same_cause.append(finding.signature)
                continue
            kept[first] = finding
        result.findings.append(finding)
    result.known = [
        KnownBug(k.fixture, k.cause, k.still_failing, k.seen, k.state_line()) for k in causes.known
    ]
    result.seconds = time.monotonic() - start
    return result
