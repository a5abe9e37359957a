"""The ONNX Runtime adapters in-process, through the kvfuzz Python package: the same engine
classes the exec door serves, handed to kvfuzz.check as factories (numpy rows, no JSON).
An honest variant passes all six properties; a wrong window is caught on a row."""

import os
import sys

import kvfuzz
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "adapters", "onnxruntime"))

import ort_attention_engine  # noqa: E402
import ort_gqa_engine  # noqa: E402

CASES = int(os.environ.get("KVFUZZ_ORT_INPROCESS_CASES", "40"))


@pytest.mark.parametrize(
    "module, flags",
    [
        (ort_gqa_engine, ["--dtype", "f32", "--path", "batched"]),
        (ort_gqa_engine, ["--dtype", "f16", "--path", "shared"]),
        (ort_attention_engine, ["--dtype", "f32"]),
    ],
)
def test_honest_adapter_passes(module, flags, tmp_path):
    result = kvfuzz.check(module.factory(flags), cases=CASES, seed=3, out=str(tmp_path), jobs=2)
    assert result.passed, result.summary()
    assert result.cases == CASES and result.skipped == 0, result.summary()


@pytest.mark.parametrize("module", [ort_gqa_engine, ort_attention_engine])
def test_wrong_window_is_caught_on_a_row(module, tmp_path):
    flags = ["--dtype", "f32", "--bug", "window"]
    result = kvfuzz.check(module.factory(flags), cases=CASES, seed=3, out=str(tmp_path), jobs=2, shrink_seconds=5)
    assert not result.passed, result.summary()
    signatures = {finding.signature for finding in result.findings}
    assert signatures and all(s.endswith("/mismatch") for s in signatures), signatures
