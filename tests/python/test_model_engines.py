"""Whole models from Python and through exec (issue 26, item 7): a class saying
`whole_model = True` is given vocabulary ids and returns logits; kvfuzz judges them at model
level against the double full-prefix logits, with check, replay, explain, shrink, the printed
commands and the pytest plugin. The honest numpy model (examples/python-engine/numpy_model.py)
passes; each of its two bugs is found by a margin of orders of magnitude; a malformed answer
names the method and the field."""

import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import kvfuzz
from conftest import EXAMPLES, ROOT
from numpy_model import ForkAlias, NumpyModel, RopeInChunk


def kvfuzz_binary():
    """The kvfuzz command the suite built (ctest passes it), else the default preset's."""
    path = os.environ.get("KVFUZZ_BINARY") or os.path.join(ROOT, "build", "default", "harness", "kvfuzz")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the kvfuzz command is not built at {path} (set KVFUZZ_BINARY)")
    return path


def test_the_numpy_model_passes_every_property_in_f32_and_f16(tmp_path):
    result = kvfuzz.check(NumpyModel, cases=40, out=str(tmp_path))
    assert result.passed, result.summary()
    assert result.rows > 1000 and result.unjudged == 0 and result.skipped == 0
    # Its generated cases are model scenarios of both dtypes it supports.
    engine = kvfuzz.engine(NumpyModel)
    assert engine.declarations()["whole_model"] is True
    scenarios = [kvfuzz.generate(seed, engine) for seed in range(40)]
    assert all(s.is_model for s in scenarios)
    assert {s.dtype for s in scenarios} == {"f32", "f16"}


@pytest.mark.parametrize("bug, property_", [(RopeInChunk, "prefix"), (ForkAlias, "prefix")])
def test_each_bug_is_found_shrunk_explained_and_replayed_as_printed(bug, property_, tmp_path):
    result = kvfuzz.check(bug, cases=40, out=str(tmp_path / "out"))
    assert not result.passed
    finding = next(f for f in result.findings if f.property == property_)
    # The margin: the error is orders of magnitude over the bound.
    error, bound = map(float, re.search(r"error (\S+) > bound (\S+)", finding.report).groups())
    assert error > 100 * bound, finding.report
    shrunk = kvfuzz.load_fixture(finding.fixture)
    assert shrunk.is_model and shrunk.tokens <= 4, shrunk
    assert "FAIL (model level" in kvfuzz.explain(shrunk, bug)
    assert "pass (model level" in kvfuzz.explain(shrunk, NumpyModel)
    assert kvfuzz.replay(finding.fixture, NumpyModel).passed
    # The printed command, from another folder, finds it again (status 1).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(finding.replay_command, shell=True, cwd=elsewhere, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 1, (finding.replay_command, run.stdout, run.stderr)
    assert "logits" in run.stdout + run.stderr


def test_shrink_takes_a_model_fixture_to_its_few_tokens(tmp_path):
    result = kvfuzz.check(ForkAlias, cases=40, out=str(tmp_path), shrink_seconds=0)
    raw = kvfuzz.load_fixture(result.findings[0].raw_fixture)
    shrunk = kvfuzz.shrink(raw, ForkAlias, property=result.findings[0].property)
    assert shrunk.scenario.is_model and shrunk.scenario.tokens < raw.tokens
    assert shrunk.signature == result.findings[0].signature


class _LogitsOfAnotherVocab(NumpyModel):
    def step(self, chunks):
        return [(p, np.asarray(logits)[:, :-1]) for p, logits in super().step(chunks)]


class _AGenerator(NumpyModel):
    def step(self, chunks):
        return (r for r in super().step(chunks))


@pytest.mark.parametrize(
    "engine, message",
    [
        (_LogitsOfAnotherVocab, r"step's result 0's logits has shape \(\d+, \d+\); expected \(\d+, \d+\)"),
        (_AGenerator, r"step returned a generator \(.*\); expected a list of \d+ \(positions, logits\) pairs"),
    ],
)  # fmt: skip
def test_a_malformed_answer_names_the_method_and_the_field(engine, message):
    scenario = kvfuzz.generate(3, kvfuzz.engine(NumpyModel))
    outcome = kvfuzz.judge(scenario, engine, "prefix")
    assert outcome.signature == "prefix/engine-error", outcome.report
    assert re.search(message, outcome.report), outcome.report


def test_whole_model_must_be_a_boolean():
    class Unclear(NumpyModel):
        whole_model = "yes"

    with pytest.raises(TypeError, match=r"whole_model: expected True or False, got a str \('yes'\)"):
        kvfuzz.engine(Unclear)


def test_the_model_config_and_weights_a_model_is_made_with():
    seen = []

    class Recording(NumpyModel):
        def new_case(self, config):
            seen.append(config)
            super().new_case(config)

    scenario = kvfuzz.generate(5, kvfuzz.engine(NumpyModel))
    assert kvfuzz.judge(scenario, Recording, "prefix").passed
    config = seen[-1]
    weights = config.weights()
    model, layout = config.model, config.engine
    assert weights["embedding"].shape == (model.vocab, model.width)
    assert len(weights["layers"]) == model.layers
    assert weights["layers"][0]["wq"].shape == (model.width, layout.q_heads * layout.head_dim)
    assert weights["lm_head"].dtype == np.float32


def test_through_exec_the_honest_model_passes_and_a_bug_fails(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    script = os.path.join(EXAMPLES, "numpy_model.py")
    command = [kvfuzz_binary(), "check", "--cases", "20", "--jobs", "2", "--quiet"]
    engine = f"exec:{shlex.quote(sys.executable)} {shlex.quote(script)}"
    honest = subprocess.run(command + ["--engine", engine, "--out", str(tmp_path / "honest")],
                            env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert honest.returncode == 0, honest.stdout + honest.stderr
    buggy = subprocess.run(command + ["--engine", engine + " --bug fork-alias", "--out", str(tmp_path / "bug")],
                           env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "prefix/mismatch" in buggy.stdout + buggy.stderr
    # The raw fixture shrinks, replays and is explained through the same door.
    raw = next((tmp_path / "bug").glob("*.json"))
    bug = ["--engine", engine + " --bug fork-alias"]
    run = lambda *args: subprocess.run([kvfuzz_binary(), *args], env=env, capture_output=True, text=True, timeout=600)  # noqa: E731
    shrunk = run("shrink", str(raw), *bug, "--time", "60", "--quiet", "--out", str(tmp_path / "shrunk"))
    assert shrunk.returncode == 1 and "saved to" in shrunk.stdout, shrunk.stdout + shrunk.stderr
    fixture = next((tmp_path / "shrunk").glob("*.json"))
    assert kvfuzz.load_fixture(str(fixture)).is_model
    replayed = run("replay", str(fixture), *bug)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert run("replay", str(fixture), "--engine", engine).returncode == 0
    explained = run("explain", str(fixture), *bug)
    assert explained.returncode == 1 and "logits: first diverging row" in explained.stdout, explained.stdout
    # The weights files kvfuzz wrote for the engine are gone once read.
    folders = [p for p in tmp_path.iterdir() if p.name.startswith("kvfuzz-weights-")]
    assert folders and all(not list(folder.iterdir()) for folder in folders), folders


def test_the_pytest_plugin_checks_a_whole_model(run_pytest, tmp_path):
    (tmp_path / "test_model.py").write_text(
        "from numpy_model import NumpyModel, RopeInChunk\n\n"
        "def test_honest(kvfuzz_check):\n    kvfuzz_check(NumpyModel, cases=20)\n\n"
        "def test_buggy(kvfuzz_check):\n    kvfuzz_check(RopeInChunk, cases=20)\n"
    )
    run = run_pytest("test_model.py")
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "test_buggy" in run.stdout and "logits" in run.stdout
