"""The OpenVINO adapter in-process, through the kvfuzz Python package: the engine class the
exec door serves, handed to kvfuzz.check as a factory (numpy rows, no JSON). The honest
engine passes all six properties without ALiBi; the finding (ALiBi dropped under a window)
fails its fixture on a row, and passes once the window is taken away."""

import json
import os
import sys

import kvfuzz

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "openvino"))

import ov_paged_engine  # noqa: E402

FINDING = os.path.join(HERE, "fixtures", "openvino-alibi-with-window.json")


def test_honest_engine_passes(tmp_path):
    # fork=False: one process, whose compiled ops are reused from case to case.
    result = kvfuzz.check(ov_paged_engine.factory(["--no-alibi"]), cases=40, seed=2, out=str(tmp_path), fork=False)
    assert result.passed, result.summary()
    assert result.cases == 40, result.summary()


def test_alibi_is_dropped_under_a_window_and_kept_without_one(tmp_path):
    engine = ov_paged_engine.factory([])
    result = kvfuzz.replay(FINDING, engine, fork=False)
    assert not result.passed and "got 0.5," in result.summary(), result.summary()
    fixture = json.load(open(FINDING))
    del fixture["layout"]["window"]  # both keys stay visible: the same expected rows
    path = tmp_path / "without-window.json"
    path.write_text(json.dumps(fixture))
    assert kvfuzz.replay(str(path), engine, fork=False).passed
