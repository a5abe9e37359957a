"""The commands a finding prints run as printed: from another folder, with neither the
virtual environment on PATH nor PYTHONPATH, through a shell, they find the same failure
(issue 26: they said `python3` and a path relative to the folder they were printed in, and
outside the venv failed with "No module named kvfuzz", status 1 like a real failure)."""

import os
import shlex
import subprocess
import sys
import textwrap

import kvfuzz
from conftest import EXAMPLES


def engine_file(folder):
    """A file-defined engine with the reset bug of examples/python-engine, in a folder whose
    name a shell would split, importing the example engine by an absolute path."""
    folder.mkdir()
    path = folder / "position_bug.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {EXAMPLES!r})
            from buggy_numpy_engine import BuggyNumpyEngine


            class PositionBug(BuggyNumpyEngine):
                pass
            """
        )
    )
    return path


def bare_environment():
    """os.environ without the interpreter's folder on PATH (the venv's bin), PYTHONPATH or
    VIRTUAL_ENV: what a new shell outside the venv has."""
    bin_dir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    return env


def test_replay_and_rerun_commands_run_as_printed_from_another_folder(tmp_path):
    path = engine_file(tmp_path / "my engines")
    factory = kvfuzz.load_factory(f"{path}:PositionBug")
    result = kvfuzz.check(factory, cases=30, out=str(tmp_path / "out"), properties="prefix,reset")
    assert result.findings, result.summary()
    finding = result.findings[0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in (finding.replay_command, finding.rerun_command):
        words = shlex.split(command)
        assert words[0] == sys.executable and os.path.isabs(words[0]), command
        assert any(w.endswith("position_bug.py:PositionBug") and os.path.isabs(w) for w in words)
        run = subprocess.run(
            command, shell=True, cwd=elsewhere, env=bare_environment(),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        output = run.stdout + run.stderr
        assert run.returncode == 1, f"{command}\n{output}"
        assert "No module named" not in output and "no such file" not in output, output
        prop, kind = finding.signature.split("/")
        assert f"{prop}: engine" in output and kind in output, f"{command}\n{output}"
