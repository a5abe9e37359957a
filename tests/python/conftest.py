"""What the package's tests share: the repository's paths, the example engines, and a
pytest run in a subprocess (the plugin's tests judge its exit status and output)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples", "python-engine")
sys.path.insert(0, EXAMPLES)


@pytest.fixture
def run_pytest(tmp_path):
    """run_pytest(*args) -> CompletedProcess of `python -m pytest ARGS` in tmp_path, with the
    example engines importable."""

    def run(*args):
        env = dict(os.environ, PYTHONPATH=EXAMPLES)
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    return run


def failure_reports(stdout):
    """The part of a pytest run's output that holds each failure's report once: pytest
    repeats whole failure messages in its short summary when it runs under CI (the CI
    environment variable), so a count taken over all of stdout would double there."""
    return stdout.split(" short test summary info ")[0]
