"""The pytest plugin end to end: the example's pytest file passes on the honest numpy
engine, the same file on the buggy engine fails with a shrunk fixture and a replay command
that works, and an engine's exception shows its Python traceback."""

import os
import re
import subprocess
import sys

import kvfuzz
from buggy_numpy_engine import BuggyNumpyEngine
from conftest import EXAMPLES, failure_reports

BUGGY_TEST = """\
import pytest
import kvfuzz
from buggy_numpy_engine import BuggyNumpyEngine


@pytest.mark.parametrize("prop", kvfuzz.PROPERTIES)
def test_buggy(kvfuzz_check, prop):
    kvfuzz_check(BuggyNumpyEngine, properties=[prop])
"""

RAISING_TEST = """\
from numpy_engine import NumpyEngine


def divide_by_zero():
    return 1 / 0


class Raising(NumpyEngine):
    def reset(self, seq):
        divide_by_zero()


def test_raising(kvfuzz_check):
    kvfuzz_check(Raising, properties=["prefix"])
"""


def test_example_file_is_short_and_passes_on_the_honest_engine(run_pytest, tmp_path):
    example = os.path.join(EXAMPLES, "test_numpy_engine.py")
    assert len(open(example).read().splitlines()) <= 15
    done = run_pytest(example, "--kvfuzz-cases", "40", "--kvfuzz-out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout
    assert not (tmp_path / "out").exists()  # nothing failed, nothing saved


def test_under_xdist_each_worker_writes_its_own_folder(run_pytest, tmp_path):
    (tmp_path / "test_buggy.py").write_text(BUGGY_TEST)
    out = tmp_path / "out"
    done = run_pytest("test_buggy.py", "-n", "2", "--kvfuzz-cases", "40", "--kvfuzz-out", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"\b3 failed, 3 passed\b", done.stdout), done.stdout
    paths = re.findall(r"shrunk fixture: (\S+\.json)", failure_reports(done.stdout))
    assert len(paths) == 3 and len(set(paths)) == 3, paths  # no name shared by two findings
    for path in paths:
        assert re.fullmatch(re.escape(str(out)) + r"/gw[01]/[^/]+\.json", path), path
        assert not kvfuzz.replay(path, BuggyNumpyEngine).passed


def test_buggy_engine_fails_with_a_shrunk_fixture_and_its_replay_command(run_pytest, tmp_path):
    (tmp_path / "test_buggy.py").write_text(BUGGY_TEST)
    out = tmp_path / "out"
    done = run_pytest("test_buggy.py", "--kvfuzz-cases", "40", "--kvfuzz-out", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    # prefix, reset and batch see the stale position; the others compare the engine with
    # itself on variants that keep the bug alike.
    assert re.search(r"\b3 failed, 3 passed\b", done.stdout), done.stdout
    paths = re.findall(r"shrunk fixture: (\S+\.json)", failure_reports(done.stdout))
    commands = re.findall(r"replay: +(.+ -m kvfuzz replay .+)", failure_reports(done.stdout))
    assert len(paths) == 3 and len(commands) == 3, done.stdout
    for path in paths:
        shrunk = kvfuzz.load_fixture(path)
        # One token, a reset, one token (batch: with a neighbour in another sequence).
        assert shrunk.ops <= 4 and shrunk.tokens <= 3, path
        assert "wrong-position" in path
    # The printed command replays the failure (exit 1), run where pytest ran.
    argv = commands[0].split()
    replayed = subprocess.run(
        [sys.executable] + argv[1:], cwd=tmp_path, capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=EXAMPLES),
    )
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "1 failed" in replayed.stdout
    assert "the engine reported this token at position 1" in replayed.stdout


def test_engine_exception_shows_its_traceback(run_pytest, tmp_path):
    (tmp_path / "test_raising.py").write_text(RAISING_TEST)
    done = run_pytest("test_raising.py", "--kvfuzz-cases", "40", "--kvfuzz-out", str(tmp_path / "o"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "prefix/engine-error" in done.stdout
    assert "ZeroDivisionError: division by zero" in done.stdout
    assert "Traceback (most recent call last)" in done.stdout
    assert "in divide_by_zero" in done.stdout and "return 1 / 0" in done.stdout


COUNT_TEST = """\
from numpy_engine import NumpyEngine


class Counting(NumpyEngine):
    longest = 0  # the most tokens a sequence held

    def step(self, chunks):
        rows = super().step(chunks)
        held = [len(self.sequences[c.seq].keys) for c in chunks]
        Counting.longest = max([Counting.longest] + held)
        return rows


def test_count(kvfuzz_check):
    result = kvfuzz_check(Counting, properties=["prefix"])
    assert (result.cases, result.seed) == (7, 5), (result.cases, result.seed)
    assert 0 < Counting.longest <= 4, Counting.longest
"""


def test_options_reach_the_check(run_pytest, tmp_path):
    (tmp_path / "test_count.py").write_text(COUNT_TEST)
    # Counting.longest is counted where the engine runs: in pytest's process only without fork.
    done = run_pytest("test_count.py", "--kvfuzz-cases", "7", "--kvfuzz-seed", "5")
    assert done.returncode == 1 and "AssertionError: 0" in done.stdout, done.stdout + done.stderr
    options = ["--kvfuzz-seed", "5", "--kvfuzz-max-tokens", "4", "--kvfuzz-no-fork"]
    done = run_pytest("test_count.py", "--kvfuzz-cases", "7", *options)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_pytest("test_count.py", "--kvfuzz-cases", "8", *options)
    assert done.returncode == 1 and "(8, 5)" in done.stdout, done.stdout + done.stderr
    done = run_pytest("test_count.py", "--kvfuzz-cases", "7", "--kvfuzz-seed", "5", "--kvfuzz-no-fork")
    assert done.returncode == 1 and "assert 0 < " in done.stdout, done.stdout + done.stderr


CRASHING_TEST = """\
import ctypes
import time

from numpy_engine import NumpyEngine


class Segfaulting(NumpyEngine):
    def reset(self, seq):
        ctypes.string_at(0)


class Hanging(NumpyEngine):
    def reset(self, seq):
        time.sleep(60)


def test_hanging(kvfuzz_check):
    kvfuzz_check(Hanging, properties=["prefix"], timeout=1)


def test_segfaulting(kvfuzz_check):
    kvfuzz_check(Segfaulting, properties=["prefix"])


def test_honest_after_it(kvfuzz_check):
    kvfuzz_check(NumpyEngine, properties=["prefix"])
"""


def test_a_crashing_engine_fails_its_test_with_the_raw_fixture_and_pytest_goes_on(run_pytest, tmp_path):
    (tmp_path / "test_crashing.py").write_text(CRASHING_TEST)
    out = tmp_path / "out"
    # Only the hanging engine's test has a 1 s limit: an honest case or a shrink candidate
    # on a loaded CI machine can take longer than that.
    options = ["--kvfuzz-cases", "20", "--kvfuzz-jobs", "2", "--kvfuzz-timeout", "120"]
    done = run_pytest("test_crashing.py", *options, "--kvfuzz-out", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"\b2 failed, 1 passed\b", done.stdout), done.stdout
    assert re.search(r"timeout at case \d+ \(case seed \d+\)", done.stdout), done.stdout
    assert "longer than 1 s" in done.stdout
    head = re.search(r"crash/SIGSEGV at case (\d+) \(case seed (\d+)\)", done.stdout)
    assert head, done.stdout
    (raw,) = re.findall(r"raw fixture: +(\S+-crash\.json)", failure_reports(done.stdout))
    assert kvfuzz.load_fixture(raw).seed == int(head.group(2))
    (shrunk,) = re.findall(r"shrunk fixture: +(\S+-crash-SIGSEGV-\w+\.json)", failure_reports(done.stdout))
    assert kvfuzz.load_fixture(shrunk).ops == 1  # the reset alone
    replay = r"replay: +.+ -m kvfuzz replay " + re.escape(shrunk)
    # The engine by its absolute path: the command runs from any folder.
    assert re.search(replay + r" --engine /\S*/test_crashing\.py:Segfaulting", done.stdout), done.stdout
    (rerun,) = re.findall(r"rerun: +.+ -m kvfuzz (check --engine \S+:Segfaulting .+)", failure_reports(done.stdout))
    assert re.search(r"rerun: +.+:Hanging .*--timeout 1\b", done.stdout), done.stdout
    assert "--case-seed " + head.group(2) in rerun and "--timeout 120" in rerun
    # The rerun command runs exactly that case again, and finds the same crash.
    again = subprocess.run(
        [sys.executable, "-m", "kvfuzz"] + rerun.split() + ["--out", str(tmp_path / "again")],
        cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=EXAMPLES),
    )
    assert again.returncode == 1 and "crash/SIGSEGV at case 1 (case seed " + head.group(2) in again.stdout, again.stdout + again.stderr
