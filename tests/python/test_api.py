"""The package's in-process API, each piece tried both ways: an honest engine passes, a
wrong one fails."""

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import kvfuzz
from buggy_numpy_engine import BuggyNumpyEngine
from conftest import EXAMPLES, ROOT
from numpy_engine import NumpyEngine

WORKED = os.path.join(ROOT, "corpus", "seeds", "worked-example.json")


class NoHistory(NumpyEngine):
    """The numpy engine announcing neither truncate nor fork."""

    capabilities = {"truncate": False, "fork": False}


def test_generator_is_deterministic_and_follows_the_engine():
    assert kvfuzz.generate(7).to_json() == kvfuzz.generate(7).to_json()
    assert kvfuzz.generate(7).to_json() != kvfuzz.generate(8).to_json()
    ops = "".join(kvfuzz.generate(kvfuzz.case_seed(1, i)).to_json() for i in range(200))
    assert '"truncate"' in ops and '"fork"' in ops
    ops = "".join(kvfuzz.generate(kvfuzz.case_seed(1, i), NoHistory).to_json() for i in range(200))
    assert '"truncate"' not in ops and '"fork"' not in ops
    small = [kvfuzz.generate(kvfuzz.case_seed(2, i), max_head_dim=4, max_q_heads=2) for i in range(50)]
    assert max(s.head_dim for s in small) <= 4 and max(s.q_heads for s in small) <= 2


def test_reference_of_the_worked_example():
    rows = kvfuzz.reference(kvfuzz.load_fixture(WORKED))
    assert [(r.seq, r.epoch, r.pos) for r in rows] == [(0, 0, p) for p in range(5)]
    assert [r.values[0, 0] for r in rows[3:]] == pytest.approx([7.5, 12.4])
    assert all(r.bound[0] > 0 for r in rows)


def test_judge_one_property():
    scenario = kvfuzz.load_fixture(os.path.join(ROOT, "corpus", "seeds", "reset-two-requests.json"))
    assert kvfuzz.judge(scenario, NumpyEngine, "reset").passed
    outcome = kvfuzz.judge(scenario, BuggyNumpyEngine, "reset")
    assert not outcome.passed and outcome.signature == "reset/wrong-position"
    with pytest.raises(ValueError, match="property: expected one of prefix"):
        kvfuzz.judge(scenario, NumpyEngine, "prefx")


def test_replay_of_the_installed_corpus_and_of_seeds():
    corpus = kvfuzz.corpus_path()
    assert os.path.isfile(os.path.join(corpus, "seeds", "worked-example.json"))
    result = kvfuzz.replay(corpus, NumpyEngine)
    # The numpy engine declares no attention feature, no quantized KV cache, no MLA and no
    # interleaved RoPE pairs: the seeds that have one are skipped (and the model fixture whose
    # cache is quantized).
    featured = sum("attention" in f.report or "soft cap" in f.report or "ALiBi" in f.report
                   or "KV cache" in f.report or "value read from its key" in f.report
                   or "interleaved pairs" in f.report
                   for f in result.fixtures if f.status == "skip")
    assert featured == result.count("skip") == 12, result.summary()
    assert result.passed and result.count("pass") == len(kvfuzz.fixtures(corpus)) - 12 >= 20
    assert kvfuzz.replay(corpus, kvfuzz.builtin_engine("paged")).passed
    seeds = os.path.join(ROOT, "corpus", "seeds")
    assert not kvfuzz.replay(seeds, BuggyNumpyEngine).passed
    assert not kvfuzz.replay(seeds, kvfuzz.builtin_engine("mask-origin")).passed


def test_replay_of_a_malformed_fixture_is_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 1}')
    result = kvfuzz.replay(str(bad), NumpyEngine)
    assert not result.passed and result.count("bad") == 1
    assert str(bad) in result.fixtures[0].report
    with pytest.raises(kvfuzz.FixtureError, match="bad.json"):
        kvfuzz.load_fixture(bad)


def test_check_saves_before_shrinking_and_the_case_seed_makes_the_case_again(tmp_path):
    assert kvfuzz.check(NumpyEngine, cases=30, out=str(tmp_path / "honest")).passed
    assert not (tmp_path / "honest").exists()
    result = kvfuzz.check(BuggyNumpyEngine, cases=30, properties=["prefix"], out=str(tmp_path))
    (finding,) = result.findings
    assert finding.signature == "prefix/wrong-position" and finding.property == "prefix"
    raw = kvfuzz.load_fixture(finding.raw_fixture)
    assert raw.seed == finding.case_seed
    assert raw.hash == kvfuzz.generate(finding.case_seed, BuggyNumpyEngine).hash
    shrunk = kvfuzz.load_fixture(finding.fixture)
    assert os.path.dirname(finding.fixture) == str(tmp_path)
    assert (shrunk.ops, shrunk.tokens) == (3, 2)
    assert not kvfuzz.replay(finding.fixture, BuggyNumpyEngine).passed
    assert kvfuzz.replay(finding.fixture, NumpyEngine).passed


def test_check_finds_builtin_mutants_too(tmp_path):
    result = kvfuzz.check(kvfuzz.builtin_engine("mask-origin"), cases=20, out=str(tmp_path))
    assert "prefix/mismatch" in [f.signature for f in result.findings]
    assert kvfuzz.check(kvfuzz.builtin_engine("flash"), cases=20, out=str(tmp_path)).passed


def test_shrink_a_fixture(tmp_path):
    seeds = os.path.join(ROOT, "corpus", "seeds", "reset-two-requests.json")
    assert kvfuzz.shrink(seeds, NumpyEngine) is None  # passes: nothing to shrink
    result = kvfuzz.shrink(seeds, BuggyNumpyEngine, "prefix", out=str(tmp_path))
    assert result.signature == "prefix/wrong-position"
    assert os.path.isfile(result.fixture) and result.scenario.tokens <= 2


class _SlowBuggy(BuggyNumpyEngine):
    """The buggy engine, 50 ms a call to make (a transformers-sized construction)."""

    def __init__(self, config):
        time.sleep(0.05)
        super().__init__(config)


def test_shrink_on_a_slow_engine_with_a_candidate_budget_drops_unused_tokens(tmp_path):
    # A failing case whose table is made explicit with 30 tokens the program never uses.
    seeds = os.path.join(ROOT, "corpus", "seeds", "reset-two-requests.json")
    fat = json.load(open(seeds))
    used = fat["tokens"]["explicit"]
    fat["tokens"]["explicit"] = used + [used[0]] * 30
    fat.pop("expect", None)
    path = tmp_path / "fat.json"
    path.write_text(json.dumps(fat))
    result = kvfuzz.shrink(str(path), _SlowBuggy, "prefix", max_candidates=3, out=str(tmp_path))
    assert result.signature == "prefix/wrong-position"
    assert result.out_of_candidates and not result.timed_out
    # 3 candidates of the moves (cheap moves first, under so small a budget), then the
    # canonical form when the table still has unused entries.
    assert result.tried <= 4 and (result.canonicalised or result.tried == 3)
    assert len(json.load(open(result.fixture))["tokens"]["explicit"]) <= len(used)
    assert os.path.getsize(result.fixture) < os.path.getsize(path)


class Declaring(NumpyEngine):
    numerics = {"output": "f32"}
    supports = {"dtypes": ["f16"], "max_head_dim": 8}


class MisDeclaring(NumpyEngine):
    numerics = {"output": "fp8"}


def test_declarations_are_read_and_followed():
    declared = kvfuzz.engine(Declaring).declarations()
    assert declared["supports"]["dtypes"] == ["f16"] and declared["supports"]["max_head_dim"] == 8
    cases = [kvfuzz.generate(kvfuzz.case_seed(3, i), Declaring) for i in range(40)]
    assert {s.dtype for s in cases} == {"f16"} and max(s.head_dim for s in cases) <= 8
    assert kvfuzz.check(Declaring, cases=20, properties=["prefix"]).passed
    with pytest.raises(kvfuzz.EngineError, match=r"numerics\.output: expected one of"):
        kvfuzz.check(MisDeclaring, cases=1)


def _one_token_engine(make_out):
    """An honest engine whose step returns its rows as make_out(rows as float64) makes them."""

    class Shaped(NumpyEngine):
        def step(self, chunks):
            return [(p, make_out(out)) for p, out in super().step(chunks)]

    return Shaped


@pytest.mark.parametrize(
    "make_out",
    [
        lambda out: out.astype(np.float32),
        lambda out: np.ascontiguousarray(out.transpose(1, 0, 2)).transpose(1, 0, 2),
        lambda out: out.tolist(),
        lambda out: memoryview(np.ascontiguousarray(out, dtype=np.float32)),
    ],
    ids=["float32", "strided", "lists", "buffer"],
)
def test_outputs_of_any_array_kind(make_out):
    outcome = kvfuzz.judge(kvfuzz.load_fixture(WORKED), _one_token_engine(make_out), "prefix")
    assert outcome.passed, outcome.report


def test_float16_rows_pass_only_when_declared():
    half = _one_token_engine(lambda out: out.astype(np.float16))
    worked = kvfuzz.load_fixture(WORKED)  # row 2 is 14/3: f16 rounds it by 0.0026
    outcome = kvfuzz.judge(worked, half, "prefix")
    assert not outcome.passed and outcome.kind == "mismatch"
    half.numerics = {"output": "f16"}
    assert kvfuzz.judge(worked, half, "prefix").passed


def test_a_wrongly_shaped_output_is_an_engine_error_naming_the_shape():
    outcome = kvfuzz.judge(kvfuzz.load_fixture(WORKED), _one_token_engine(lambda o: o[:, :, :0]), "prefix")
    assert outcome.signature == "prefix/engine-error"
    assert re.search(r"out has shape \(\d+, 1, 0\); expected \(\d+, 1, 1\)", outcome.report)


class _Answering(NumpyEngine):
    """The numpy engine, its step's answer passed through `answer` (a malformed one)."""

    answer = staticmethod(lambda results: results)

    def step(self, chunks):
        return type(self).answer(super().step(chunks))


@pytest.mark.parametrize(
    "answer, message",
    [
        # Each message names the method, the field, what was expected and what arrived (issue
        # 26: the first three were "std::bad_cast", the generator our len()'s TypeError).
        (lambda rs: [(np.asarray(p, np.float64), o) for p, o in rs],
         r"step's result 0's positions\[0\] is a float \(0\.0\); expected an integer position: "
         r"a sequence of \d+ integers"),
        (lambda rs: [(o, p) for p, o in rs],
         r"step's result 0's positions\[0\] is a list \(.*\); expected an integer position: .*"
         r"\(is the pair \(out, positions\) instead of \(positions, out\)\?\)"),
        (lambda rs: [("abc", o) for p, o in rs],
         r"step's result 0's positions\[0\] is a str \('a'\); expected an integer position"),
        (lambda rs: [(None, o) for p, o in rs],
         r"step's result 0's positions is a NoneType \(None\); expected a sequence of \d+ integers"),
        (lambda rs: (r for r in rs),
         r"step returned a generator \(<generator object .*\); expected a list of \d+ "
         r"\(positions, out\) pairs, one per chunk"),
        (lambda rs: [(p, o, 1) for p, o in rs],
         r"step's result 0 is a tuple \(.*\); expected a \(positions, out\) pair"),
    ],
)  # fmt: skip
def test_a_malformed_answer_names_the_method_the_field_and_what_arrived(answer, message):
    engine = type("Malformed", (_Answering,), {"answer": staticmethod(answer)})
    outcome = kvfuzz.judge(kvfuzz.load_fixture(WORKED), engine, "prefix")
    assert outcome.signature == "prefix/engine-error", outcome.report
    assert "bad_cast" not in outcome.report and "has no len()" not in outcome.report
    assert re.search(message, outcome.report), outcome.report


def test_keyboard_interrupt_in_the_engine_stops_a_check_in_this_process(tmp_path):
    class Interrupted(NumpyEngine):
        def step(self, chunks):
            raise KeyboardInterrupt

    # In this process (fork=False) the check stops at once.
    with pytest.raises(KeyboardInterrupt):
        kvfuzz.check(Interrupted, cases=5, out=str(tmp_path), fork=False)
    assert kvfuzz.check(NumpyEngine, cases=3, out=str(tmp_path)).passed  # the flag is cleared
    # In a worker and in the shrink's children (the default), the engine's own
    # KeyboardInterrupt ends only that call: an engine error, found and shrunk. A real
    # Ctrl-C reaches this process too and stops the check (test_crash_isolation.py).
    result = kvfuzz.check(Interrupted, cases=5, properties=["prefix"], out=str(tmp_path), fork=True)
    (finding,) = result.findings
    assert finding.signature == "prefix/engine-error" and "KeyboardInterrupt" in finding.report
    assert kvfuzz.check(NumpyEngine, cases=3, out=str(tmp_path)).passed


def test_inputs_are_float32_numpy_arrays_the_engine_may_keep():
    seen = []

    class Keeping(NumpyEngine):
        def step(self, chunks):
            seen.extend(chunks)
            return super().step(chunks)

    assert kvfuzz.judge(kvfuzz.load_fixture(WORKED), Keeping, "prefix").passed
    chunk = seen[0]
    assert isinstance(chunk.q, np.ndarray) and chunk.q.dtype == np.float32
    assert chunk.q.shape == (chunk.tokens, 1, 1) and chunk.v.shape == (chunk.tokens, 1, 1)
    assert chunk.q.flags.owndata or chunk.q.base is not None
    assert list(np.concatenate([c.v for c in seen]).ravel()) == [2, 4, 8, 16, 32]


def test_keyboard_interrupt_in_the_factory_is_raised_and_cleared():
    # Asked here (fork=False, for a debugger), the engine's KeyboardInterrupt is Python's.
    def factory(config):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kvfuzz.check(factory, cases=1, fork=False)
    assert kvfuzz.judge(kvfuzz.load_fixture(WORKED), NumpyEngine, "prefix").passed


def test_keyboard_interrupt_in_a_forked_probe_is_the_engines_error():
    # The declarations are asked in a forked child (as a forked check judges there): what the
    # factory raises is the engine's error, and this process was never interrupted.
    def factory(config):
        raise KeyboardInterrupt

    with pytest.raises(kvfuzz.EngineError, match="the engine factory raised KeyboardInterrupt"):
        kvfuzz.check(factory, cases=1)
    assert kvfuzz.judge(kvfuzz.load_fixture(WORKED), NumpyEngine, "prefix").passed


def test_supports_that_no_head_dim_can_meet_are_refused():
    class Wide(NumpyEngine):
        supports = {"head_dim_multiple": 64}

    assert kvfuzz.generate(3, Wide).head_dim % 64 == 0
    with pytest.raises(ValueError, match="multiple of 64, but is at most 16"):
        kvfuzz.generate(3, Wide, max_head_dim=16)


def test_the_stubs_name_every_public_name_of_the_extension():
    import kvfuzz._kvfuzz as module

    stub = open(os.path.join(os.path.dirname(module.__file__), "_kvfuzz.pyi")).read()
    named = set(re.findall(r"^(?:def|class) (\w+)", stub, re.M))
    public = {n for n in dir(module) if not n.startswith("_")}
    assert public == named, (public - named, named - public)
    assert os.path.isfile(os.path.join(os.path.dirname(module.__file__), "py.typed"))


class _RoundsToTheLayoutsDtype(NumpyEngine):
    """Computes as the numpy engine, rounding its rows to the layout's dtype (f32 for f32
    and bf16 layouts, f16 for f16 ones): one class for every dtype."""

    supports = {"dtypes": ["f32", "f16"]}

    def step(self, chunks):
        dtype = np.float16 if self.config.dtype == "f16" else np.float32
        return [(p, np.asarray(o).astype(dtype)) for p, o in super().step(chunks)]


class _KeyedByDtype(_RoundsToTheLayoutsDtype):
    numerics = {"f16": {"output": "f16"}}


class _NumericsMethod(_RoundsToTheLayoutsDtype):
    def numerics(self, dtype):
        return {"output": dtype}


class _SetInInit(_RoundsToTheLayoutsDtype):
    def __init__(self, config):
        super().__init__(config)
        self.numerics = {"output": config.dtype}


class _DeclaresF32(_RoundsToTheLayoutsDtype):
    numerics = {"output": "f32"}


@pytest.mark.parametrize("engine", [_KeyedByDtype, _NumericsMethod, _SetInInit])
def test_numerics_may_follow_the_layouts_dtype(engine, tmp_path):
    # Issue 26: declarations were read once, of an f32 layout, so a class computing in the
    # layout's dtype needed one class per dtype. Each case is judged by its own engine's.
    result = kvfuzz.check(engine, cases=40, fork=False, out=str(tmp_path))
    assert result.passed, result.summary()


def test_an_engine_rounding_to_f16_fails_when_it_declares_f32(tmp_path):
    result = kvfuzz.check(_DeclaresF32, cases=40, fork=False, out=str(tmp_path), properties="prefix")
    assert [f.signature for f in result.findings] == ["prefix/mismatch"], result.summary()


def test_known_bugs_are_replayed_and_set_aside_while_the_run_looks_for_others(tmp_path):
    first = kvfuzz.check(BuggyNumpyEngine, cases=30, properties=["prefix"], out=str(tmp_path / "a"))
    (finding,) = first.findings
    assert finding.fixture
    # The same bug found again is set aside: the run passes, and says the known bug still fails.
    again = kvfuzz.check(
        BuggyNumpyEngine, cases=30, properties=["prefix"], out=str(tmp_path / "b"), known=[finding.fixture]
    )
    assert again.passed and not again.findings
    (known,) = again.known
    assert known.still_failing and known.seen >= 1
    assert "known, still failing: " + finding.fixture in again.summary()
    # A folder of known bugs (the shrunk fixture and, below it, the raw one), on an engine
    # that no longer has it: now passing.
    fixed = kvfuzz.check(NumpyEngine, cases=5, properties=["prefix"], known=[str(tmp_path / "a")])
    assert fixed.passed and [k.still_failing for k in fixed.known] == [False, False]
    assert "known, now passing" in fixed.summary()
    with pytest.raises(ValueError, match="known: .*expected a fixture file or a folder"):
        kvfuzz.check(NumpyEngine, cases=1, known=[str(tmp_path / "missing.json")])


def test_findings_that_shrink_to_one_case_are_one_root_cause(tmp_path):
    result = kvfuzz.check(BuggyNumpyEngine, cases=30, out=str(tmp_path))
    causes = [kvfuzz.root_cause_hash(f.fixture) for f in result.findings if f.fixture]
    assert len(causes) == len(set(causes))  # one finding per shrunk case
    grouped = sum(len(f.same_cause) for f in result.findings)
    # Seed 1: prefix/wrong-position, and reset and batch failures of the same wrong position
    # that shrink to the very same case.
    assert grouped >= 1, [(f.signature, f.same_cause) for f in result.findings]
    # The root-cause hash ignores what differs between two cases of one bug.
    a = json.load(open(result.findings[0].fixture))
    a["name"], a["note"] = "other", "other note"
    a["provenance"]["seed"] = 12345  # another case that shrank to the same scenario
    other = tmp_path / "renamed.json"
    other.write_text(json.dumps(a))
    assert kvfuzz.root_cause_hash(str(other)) == causes[0]


def _check_in_a_fresh_interpreter(engine_class, cases, out):
    """kvfuzz.check of torch_input_engines.ENGINE_CLASS in a new interpreter: torch stays
    out of this pytest process (imported here, its extension modules would fill the stderr
    tails that test_crash_isolation.py reads)."""
    code = (
        "import sys, kvfuzz, torch_input_engines as t\n"
        f"r = kvfuzz.check(t.{engine_class}, cases={cases}, out=sys.argv[1])\n"
        "print(r.summary())\n"
        "sys.exit(0 if r.passed else 1)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, os.path.dirname(__file__)]))
    return subprocess.run(
        [sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True, timeout=600
    )


def test_inputs_as_torch_tensors_on_request(tmp_path):
    done = _check_in_a_fresh_interpreter("TorchInputs", 20, tmp_path)
    assert done.returncode == 0 and ": pass" in done.stdout, done.stdout + done.stderr


class _BadInputs(NumpyEngine):
    inputs = "tensorflow"


def test_inputs_that_make_no_sense_are_refused_naming_the_attribute():
    with pytest.raises(kvfuzz.EngineError, match=r"inputs: expected 'numpy', 'torch' or 'torch:DEVICE', got 'tensorflow'"):
        kvfuzz.check(_BadInputs, cases=1)


def _has_cuda():
    """Asked of torch in another interpreter (torch stays out of this one)."""
    code = "import torch; print(torch.cuda.is_available())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return done.stdout.strip() == "True"


def test_inputs_as_cuda_tensors_where_a_gpu_is_present(tmp_path):
    if not _has_cuda():
        pytest.skip("no GPU on this machine: CUDA input tensors not run")
    done = _check_in_a_fresh_interpreter("CudaInputs", 10, tmp_path)
    assert done.returncode == 0 and ": pass" in done.stdout, done.stdout + done.stderr
