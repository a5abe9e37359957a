"""The transformers adapters' negative controls in one process, through the kvfuzz Python
package: each breaks one mapping on purpose (adapters/transformers, `--bug`), and each must
be caught on a row (a mismatch or a wrong position, not an engine error) within its cases of seed 1.

They ran as one exec check each until 2026-12-08: every one started Python and imported
torch and transformers again, about 7 of its 8 to 15 seconds on a 2-core machine
(docs/BENCHMARKS.md, "The test command"). Here the import is paid once; the engine classes
are the ones the exec door serves (`factory`), the cases and the judge the same. The exec
door itself stays covered by the honest exec checks and by the controls that need a fresh
process (transformers_dynamic_config_unfiled, transformers_model_padded_batch_unfiled: their
bug makes the engine raise, which ends an exec engine's process) or a compiler
(transformers_flex_bug_window)."""

import os
import sys

import kvfuzz
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "adapters", "transformers"))

import hf_attention_engine  # noqa: E402
import hf_model_engine  # noqa: E402

# (name, module, its flags, cases): the former ctest's name, what it ran, at its cases.
CONTROLS = [
    ("transformers_sdpa_bug_window", hf_attention_engine, ["--bug", "window"], 60),
    ("transformers_eager_bug_window", hf_attention_engine, ["--attention", "eager", "--bug", "window"], 60),
    ("transformers_sdpa_bug_rope", hf_attention_engine, ["--bug", "rope"], 60),
    ("transformers_sdpa_bug_numerics", hf_attention_engine, ["--bug", "numerics"], 60),
    ("transformers_static_bug_window", hf_attention_engine, ["--cache", "static", "--bug", "window"], 40),
    ("transformers_static_bug_no_crop", hf_attention_engine, ["--cache", "static", "--bug", "no-crop"], 40),
    ("transformers_padded_batch_bug_pads", hf_attention_engine, ["--batch", "padded", "--bug", "pads"], 20),
    ("transformers_padded_batch_bug_fork_rows", hf_attention_engine,
     ["--batch", "padded", "--bug", "fork-rows"], 40),
    ("transformers_model_bug_window", hf_model_engine, ["--bug", "window"], 40),
    ("transformers_model_bug_rope", hf_model_engine, ["--bug", "rope"], 40),
    ("transformers_model_bf16_bug_rope", hf_model_engine, ["--dtype", "bf16", "--bug", "rope"], 40),
    ("transformers_model_static_bug_window", hf_model_engine, ["--cache", "static", "--bug", "window"], 40),
    ("transformers_model_shared_cache_bug_pads", hf_model_engine, ["--shared-cache", "--bug", "pads"], 20),
    ("transformers_model_shared_cache_bug_fork_rows", hf_model_engine,
     ["--shared-cache", "--bug", "fork-rows"], 40),
    ("transformers_model_generate_bug_window", hf_model_engine, ["--generate", "--bug", "window"], 30),
]


@pytest.mark.parametrize("name,module,flags,cases", CONTROLS, ids=[c[0] for c in CONTROLS])
def test_each_control_is_caught_on_a_row(name, module, flags, cases, tmp_path):
    # fork=False: torch's thread pool does not survive a fork; no shrinking (what a control
    # shows is that its bug is caught; shrinking these is the exec door's and the CLI's).
    result = kvfuzz.check(module.factory(flags), cases=cases, seed=1, out=str(tmp_path), fork=False,
                          shrink_seconds=0)
    assert not result.passed, f"{name}: {result.summary()}"
    signatures = {finding.signature for finding in result.findings}
    # A row, not the engine: a broken adapter is not a caught bug (as expect_exit.sh checks).
    assert signatures and not any("engine-error" in s for s in signatures), (name, signatures)
