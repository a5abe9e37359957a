"""kvfuzz.check on the check stage's forked workers: a Python engine that segfaults, aborts
or hangs becomes a finding with its case on disk and its case seed, and this process goes
on; a crash is shrunk with its candidates judged in forked children; the findings are the
same for every number of workers; fork=False still judges an honest engine; Ctrl-C stops
a forked check with KeyboardInterrupt."""

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import kvfuzz
from conftest import EXAMPLES
from numpy_engine import NumpyEngine


class Segfaulting(NumpyEngine):
    """Honest but for a reset, which reads address 0 (a bug in an extension, in effect)."""

    def reset(self, seq):
        ctypes.string_at(0)


class Aborting(NumpyEngine):
    def reset(self, seq):
        os.abort()


class Hanging(NumpyEngine):
    def reset(self, seq):
        time.sleep(60)


def _crash_findings(result):
    return [f for f in result.findings if f.crashed]


def test_a_segfaulting_engine_is_a_finding_with_its_case_on_disk(tmp_path):
    result = kvfuzz.check(Segfaulting, cases=20, out=str(tmp_path))
    (finding,) = _crash_findings(result)
    assert finding.signature == "crash/SIGSEGV" and finding.property is None
    raw = kvfuzz.load_fixture(finding.raw_fixture)
    assert raw.seed == finding.case_seed
    assert raw.hash == kvfuzz.generate(finding.case_seed, Segfaulting).hash
    assert finding.case_seed == kvfuzz.case_seed(1, finding.case_index)
    # faulthandler in the worker: the Python stack of the crash is in the report.
    assert "Segmentation fault" in finding.report and "in reset" in finding.report
    text = str(finding)
    assert finding.raw_fixture in text and str(finding.case_seed) in text
    assert f"--case-seed {finding.case_seed}" in finding.rerun_command
    assert finding.duplicates > 0  # later cases with a reset crash the same way
    # Shrunk, each candidate judged in a forked child, to the reset alone.
    shrunk = kvfuzz.load_fixture(finding.fixture)
    assert (shrunk.ops, shrunk.tokens) == (1, 0), finding.fixture
    assert f"-m kvfuzz replay {finding.fixture} --engine" in finding.replay_command
    # Replayed in a process of its own, the shrunk case still crashes the engine, in the
    # replay's child: a failure (status 1) that says so, not the end of the replay.
    replayed = subprocess.run(
        [sys.executable] + finding.replay_command.split()[1:],
        capture_output=True, text=True, cwd=os.getcwd(),
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, os.path.dirname(__file__)])),
    )
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "crash/SIGSEGV" in replayed.stdout, replayed.stdout
    # With --no-fork, in the replay's own process: it dies of the engine's segfault.
    unisolated = subprocess.run(
        [sys.executable] + finding.replay_command.split()[1:] + ["--no-fork"],
        capture_output=True, text=True, cwd=os.getcwd(),
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, os.path.dirname(__file__)])),
    )
    assert unisolated.returncode == -signal.SIGSEGV, unisolated.stdout + unisolated.stderr
    # This process lives on, and judges the next engine.
    assert kvfuzz.check(NumpyEngine, cases=5, out=str(tmp_path / "honest")).passed


def test_an_aborting_engine_is_a_finding(tmp_path):
    result = kvfuzz.check(Aborting, cases=20, properties=["prefix"], out=str(tmp_path))
    assert [f.signature for f in result.findings] == ["crash/SIGABRT"]
    assert os.path.isfile(result.findings[0].raw_fixture)
    assert kvfuzz.load_fixture(result.findings[0].fixture).ops == 1


class Exiting(NumpyEngine):
    """Exits with 3 on a reset of sequence 1 only: a candidate that drops that reset, or
    resets another sequence, no longer ends this way and is not kept."""

    def reset(self, seq):
        if seq == 1:
            os._exit(3)
        super().reset(seq)


def test_an_exit_is_shrunk_to_what_still_exits_the_same_way(tmp_path):
    result = kvfuzz.check(Exiting, cases=40, properties=["prefix"], out=str(tmp_path))
    (finding,) = result.findings
    assert finding.signature == "exit/3"
    shrunk = kvfuzz.load_fixture(finding.fixture)
    assert shrunk.ops == 1 and shrunk.sequences >= 2, finding.fixture
    assert '"reset"' in shrunk.to_json() and '"seq": 1' in shrunk.to_json()


def test_a_hanging_engine_times_out_and_the_check_goes_on(tmp_path):
    start = time.monotonic()
    result = kvfuzz.check(
        Hanging, cases=20, properties=["prefix"], out=str(tmp_path), timeout=1, max_failures=1
    )
    assert time.monotonic() - start < 30
    (finding,) = result.findings
    assert finding.signature == "timeout" and finding.fixture is None  # not shrunk
    assert kvfuzz.load_fixture(finding.raw_fixture).seed == finding.case_seed
    assert "longer than 1 s" in finding.report


def _signatures(result):
    return [(f.signature, f.case_seed, f.duplicates, os.path.basename(f.raw_fixture)) for f in result.findings]


def test_findings_are_the_same_for_every_number_of_workers(tmp_path):
    one = kvfuzz.check(Segfaulting, cases=24, out=str(tmp_path / "1"), jobs=1, max_failures=3)
    two = kvfuzz.check(Segfaulting, cases=24, out=str(tmp_path / "2"), jobs=2, max_failures=3)
    assert _signatures(one) == _signatures(two) and one.findings
    assert (one.cases, one.crashes) == (two.cases, two.crashes)


def test_without_fork_an_honest_engine_passes_and_a_buggy_one_fails(tmp_path):
    called = []
    honest = kvfuzz.check(NumpyEngine, cases=20, out=str(tmp_path), fork=False, progress=lambda *a: called.append(a))
    assert honest.passed and honest.cases == 20 and called[-1] == (20, 20)
    from buggy_numpy_engine import BuggyNumpyEngine

    result = kvfuzz.check(BuggyNumpyEngine, cases=30, properties=["prefix"], out=str(tmp_path), fork=False)
    assert [f.signature for f in result.findings] == ["prefix/wrong-position"]


def test_ignored_signatures_are_set_aside(tmp_path):
    result = kvfuzz.check(Segfaulting, cases=10, properties=["prefix"], out=str(tmp_path), ignore=["crash/SIGSEGV"])
    assert result.passed and result.ignored == ["crash/SIGSEGV"]


def test_bad_options_are_one_clear_line():
    with pytest.raises(ValueError, match="jobs: expected a positive number, got 0"):
        kvfuzz.check(NumpyEngine, jobs=0)
    with pytest.raises(ValueError, match="timeout: expected a positive number"):
        kvfuzz.check(NumpyEngine, timeout=-1)


def test_ctrl_c_stops_a_forked_check(tmp_path):
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            kvfuzz.check(Hanging, cases=5, properties=["prefix"], out=str(tmp_path), timeout=60)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 20
    assert kvfuzz.check(NumpyEngine, cases=3, out=str(tmp_path)).passed  # the flag is cleared


def test_a_forked_check_lets_other_threads_run_and_runs_from_a_thread(tmp_path):
    ticks, stop = [0], threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        # About a second spent waiting on a hanging worker, with the GIL let go.
        result = kvfuzz.check(
            Hanging, cases=20, properties=["prefix"], out=str(tmp_path / "h"), timeout=1, max_failures=1
        )
    finally:
        stop.set()
        ticker.join()
    assert [f.signature for f in result.findings] == ["timeout"]
    assert ticks[0] > 20, ticks[0]
    # Workers forked from a thread that is not the main one.
    found = {}
    worker = threading.Thread(
        target=lambda: found.update(r=kvfuzz.check(Segfaulting, cases=20, out=str(tmp_path / "s"), jobs=2))
    )
    worker.start()
    worker.join(120)
    assert [f.signature for f in found["r"].findings] == ["crash/SIGSEGV"]


def test_two_forked_checks_at_once_are_refused_with_one_line(tmp_path):
    errors = []
    marker = tmp_path / "first-is-running"

    class Slow(NumpyEngine):
        # Every case's first step outlives the timeout (1 s): the first check lasts about
        # 10 s. The marker, written from its worker process, says it is under way (a fixed
        # sleep before the second check was a race on a loaded machine).
        def step(self, chunks):
            marker.touch()
            time.sleep(3)
            return super().step(chunks)

    def first():
        kvfuzz.check(Slow, cases=10, properties=["prefix"], out=str(tmp_path / "a"), timeout=1)

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # the first is waiting on its workers, the GIL let go
    assert marker.exists(), "the first check never reached its engine's step"
    try:
        kvfuzz.check(NumpyEngine, cases=2, out=str(tmp_path / "b"))
    except RuntimeError as error:
        errors.append(str(error))
    thread.join()
    assert errors and "already running in another thread" in errors[0], errors
    assert kvfuzz.check(NumpyEngine, cases=2, out=str(tmp_path / "c")).passed  # once it is done


class CallbackError(Exception):
    pass


@pytest.mark.parametrize("fork", [True, False])
def test_callbacks_run_python_in_this_process_and_their_exceptions_stop_the_run(tmp_path, fork):
    from kvfuzz import _kvfuzz

    engine = kvfuzz.engine(Segfaulting if fork else kvfuzz.builtin_engine("mask-origin"))
    seeds = [kvfuzz.case_seed(1, i) for i in range(30)]
    seen = []

    def on_finding(finding):
        seen.append((os.getpid(), finding.signature, os.path.isfile(finding.fixture)))

    run = _kvfuzz.run_check(engine, seeds, ["prefix"], str(tmp_path), fork=fork, on_finding=on_finding)
    assert seen == [(os.getpid(), run.findings[0].signature, True)]

    def raising(finding):
        raise CallbackError(finding.signature)

    with pytest.raises(CallbackError):
        _kvfuzz.run_check(engine, seeds, ["prefix"], str(tmp_path), fork=fork, on_finding=raising)
    assert kvfuzz.check(NumpyEngine, cases=3, out=str(tmp_path / "after")).passed


class DoublingOrCrashing(NumpyEngine):
    """Rows twice too large (prefix fails it) for chunks of two tokens or more; a chunk of
    one token reads address 0: a shrink's candidates that split a chunk down to one token
    crash it."""

    def step(self, chunks):
        if any(chunk.tokens == 1 for chunk in chunks):
            ctypes.string_at(0)
        return [(positions, out * 2) for positions, out in super().step(chunks)]


SEEDS = os.path.join(os.path.dirname(__file__), "..", "..", "corpus", "seeds")


def test_replay_reports_a_segfaulting_engine_and_goes_on():
    fixture = os.path.join(SEEDS, "reset-two-requests.json")  # Segfaulting dies on its reset
    result = kvfuzz.replay(fixture, Segfaulting)
    (replayed,) = result.fixtures
    assert replayed.status == "fail" and not result.passed
    assert "crash/SIGSEGV: the engine died of SIGSEGV while it replayed the fixture" in replayed.report
    assert "in reset" in replayed.report  # faulthandler's Python stack, from the child's stderr
    # This process lives on, and replays the honest engine.
    assert kvfuzz.replay(fixture, NumpyEngine).passed


def test_replay_of_a_hanging_engine_ends_at_its_timeout():
    fixture = os.path.join(SEEDS, "reset-two-requests.json")
    start = time.monotonic()
    (replayed,) = kvfuzz.replay(fixture, Hanging, timeout=1).fixtures
    assert replayed.status == "fail" and "timeout: the engine was still running after 1 s" in replayed.report
    assert time.monotonic() - start < 20


def test_a_shrink_candidate_that_crashes_is_rejected_not_the_end_of_the_shrink(tmp_path):
    worked = os.path.join(SEEDS, "worked-example.json")  # chunks of three and two tokens
    shrunk = kvfuzz.shrink(worked, DoublingOrCrashing, "prefix", seconds=30)
    assert shrunk is not None and shrunk.signature == "prefix/mismatch"
    assert shrunk.tried > shrunk.accepted  # among the rejected: the candidates that crashed
    program = json.loads(shrunk.scenario.to_json())["program"]
    chunks = [op["tokens"] for op in program if op["op"] == "append"]
    chunks += [chunk["tokens"] for op in program if op["op"] == "step" for chunk in op["chunks"]]
    assert chunks and all(len(tokens) >= 2 for tokens in chunks), program


class CrashingWhenMade(NumpyEngine):
    """Reads address 0 as it is made: while kvfuzz asks it for its declarations."""

    def __init__(self, config):
        ctypes.string_at(0)


def test_an_engine_that_crashes_while_it_is_asked_its_declarations_is_one_error():
    # The probe runs in a forked child: the segfault is that child's, and this process says
    # how it ended and goes on.
    with pytest.raises(RuntimeError, match="SIGSEGV"):
        kvfuzz.engine(CrashingWhenMade).declarations()
    with pytest.raises(RuntimeError, match="SIGSEGV"):
        kvfuzz.check(CrashingWhenMade, cases=1)
    assert kvfuzz.engine(NumpyEngine).declarations()["capabilities"]["truncate"] in (True, False)
