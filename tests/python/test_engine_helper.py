"""kvfuzz.exec_server (python/kvfuzz/exec_server.py, the exec protocol's loop) reads and
writes the protocol with orjson when it is there (the project's .venv has it) and with json
otherwise: both must give kvfuzz the same numbers, and NaN must stay apart from Infinity
(orjson alone writes both as null)."""

import io
import json
import math
import sys

import pytest
from kvfuzz import exec_server as kvfuzz_engine  # the installed package's; its old name below

REPLY = {"ok": True, "chunks": [{"positions": [3, 4], "out": [[[0.1, -2.5e-7]], [[1e300, 7.0]]]}]}


@pytest.fixture(params=["orjson", "json"])
def codec(request, monkeypatch):
    if request.param == "json":
        monkeypatch.setattr(kvfuzz_engine, "orjson", None)
    else:
        assert kvfuzz_engine.orjson is not None, "the .venv has no orjson (scripts/setup.sh)"
    return request.param


def test_a_finite_reply_reads_back_as_the_same_numbers(codec):
    assert json.loads(kvfuzz_engine._dumps(REPLY)) == REPLY


@pytest.mark.parametrize("value, token", [(math.inf, "Infinity"), (-math.inf, "-Infinity"), (math.nan, "NaN")])
def test_non_finite_values_are_written_as_json_writes_them(codec, value, token):
    reply = json.loads(json.dumps(REPLY))
    reply["chunks"][0]["out"][0][0][1] = value
    text = kvfuzz_engine._dumps(reply)
    assert "[0.1," + token + "]" in text, text


def test_a_numpy_value_is_the_engines_error_in_both(codec):
    import numpy  # pinned in the .venv (scripts/python-requirements.txt): never a skip
    with pytest.raises(TypeError):
        kvfuzz_engine._dumps({"ok": True, "value": numpy.float32(1.5)})


def test_requests_with_nan_are_read_in_both(codec):
    request = kvfuzz_engine._loads('{"op":"step","x":[NaN,1.5]}')
    assert math.isnan(request["x"][0]) and request["x"][1] == 1.5


def test_serve_answers_through_the_codec(codec, monkeypatch):
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # serve() points it at stderr

    class Echo:
        name = "echo"

        def __init__(self, config):
            self.config = config

        def step(self, chunks):
            return [([0], [[[float("inf")]]])]

        def reset(self, seq):
            pass

    hello = json.dumps(
        {
            "op": "hello",
            "protocol": 2,
            "layout": {"q_heads": 1, "kv_heads": 1, "head_dim": 1, "value_dim": 1, "page_size": 16,
                       "dtype": "f32", "scale": 1.0, "rope_theta": None, "window": None},
            "sequences": 1,
            "page_order": [0, 1],
            "poison": "nan",
        }
    )
    step = json.dumps({"op": "step", "chunks": [{"seq": 0, "q": [[[1.0]]], "k": [[[1.0]]], "v": [[[1.0]]]}]})
    replies = io.StringIO()
    kvfuzz_engine.serve(Echo, requests=io.StringIO(hello + "\n" + step + "\n"), replies=replies)
    lines = replies.getvalue().splitlines()
    assert json.loads(lines[0])["ok"], lines[0]
    assert lines[1] == '{"ok":true,"chunks":[{"positions":[0],"out":[[[Infinity]]]}]}', lines[1]
