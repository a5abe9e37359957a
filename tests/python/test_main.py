"""python -m kvfuzz: the commands a failure prints, with their exit statuses (0 pass,
1 a failure, 2 bad input) and one-line errors."""

import os
import subprocess
import sys

from conftest import EXAMPLES, ROOT

HONEST = os.path.join(EXAMPLES, "numpy_engine.py") + ":NumpyEngine"
BUGGY = os.path.join(EXAMPLES, "buggy_numpy_engine.py") + ":BuggyNumpyEngine"


def kvfuzz_main(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "kvfuzz", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_replay_exit_statuses():
    corpus = os.path.join(ROOT, "corpus")
    done = kvfuzz_main("replay", corpus, "--engine", HONEST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 failed, 0 bad" in done.stdout
    done = kvfuzz_main("replay", corpus, "--engine", BUGGY)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL " in done.stdout and "wrong-position" in done.stdout


def test_bad_engine_specs_are_one_line_and_exit_2(tmp_path):
    seeds = os.path.join(ROOT, "corpus", "seeds")
    for spec, says in [
        ("NumpyEngine", "expected MODULE:ATTR or FILE.py:ATTR"),
        ("no_such_module_here:Engine", "cannot import no_such_module_here: ModuleNotFoundError"),
        (os.path.join(EXAMPLES, "numpy_engine.py") + ":Nope", "has no attribute Nope"),
        (str(tmp_path / "missing.py") + ":E", "no such file"),
    ]:
        done = kvfuzz_main("replay", seeds, "--engine", spec)
        assert done.returncode == 2, (spec, done.stdout, done.stderr)
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_check_and_shrink_commands(tmp_path):
    done = kvfuzz_main("check", "--engine", BUGGY, "--cases", "20", "--property", "prefix",
                       "--out", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    raw = [f for f in os.listdir(tmp_path / "raw")]
    assert len(raw) == 1
    shrunk = kvfuzz_main("shrink", str(tmp_path / "raw" / raw[0]), "--engine", BUGGY,
                         "--out", str(tmp_path / "again"))
    assert shrunk.returncode == 1, shrunk.stdout + shrunk.stderr
    assert "prefix/wrong-position: saved to" in shrunk.stdout
    assert kvfuzz_main("shrink", str(tmp_path / "raw" / raw[0]), "--engine", HONEST).returncode == 0


def test_check_flags_of_the_case_runner(tmp_path):
    done = kvfuzz_main("check", "--engine", HONEST, "--cases", "10", "--jobs", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    done = kvfuzz_main("check", "--engine", BUGGY, "--cases", "20", "--property", "prefix", "--no-fork",
                       "--ignore", "prefix/wrong-position", "--out", str(tmp_path))
    assert done.returncode == 0 and "ignored: prefix/wrong-position" in done.stdout, done.stdout
    for flag, value, says in [("--jobs", "0", "jobs: expected a positive number, got 0"),
                              ("--timeout", "0", "timeout: expected a positive number, got 0.0")]:
        done = kvfuzz_main("check", "--engine", HONEST, flag, value)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
