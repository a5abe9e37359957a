"""The vLLM adapter in-process, through the kvfuzz Python package: the engine class the exec
door serves, handed to kvfuzz.check as a factory (numpy rows, no JSON), run by .venv-vllm's
interpreter. The honest engine passes all six properties; two findings fail their fixtures
on a row (docs/findings/vllm.md) and the first passes once the poison is finite; the block
tables (adapters/common/block_tables.py) share, copy and poison blocks as documented.

kvfuzz here is the package python_install built into .venv, imported from there by this
interpreter (the same CPython 3.11, numpy 2.4.6): the package is built once, not again for
a second environment. Only the package's folder is put on the path, not .venv's
site-packages, whose torch is another version."""

import glob
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def _import_kvfuzz():
    found = glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "kvfuzz"))
    if not found:
        raise ImportError("kvfuzz is not installed in .venv: run the python_install test (tests/python) first")
    folder = tempfile.mkdtemp(prefix="kvfuzz-package-")
    os.symlink(os.path.abspath(found[0]), os.path.join(folder, "kvfuzz"))
    sys.path.insert(0, folder)
    import kvfuzz

    return kvfuzz


kvfuzz = _import_kvfuzz()
sys.path.insert(0, os.path.join(ROOT, "adapters", "vllm"))
sys.path.insert(0, os.path.join(ROOT, "adapters", "common"))

import numpy as np  # noqa: E402
import vllm_cpu_engine  # noqa: E402
from block_tables import BlockTables  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")
# One build per process (they register the same ops): the AVX2 one, which every x86-64
# machine the project uses runs.
HONEST = ["--library", "avx2", "--finite-poison", "--no-bf16"]


def test_honest_engine_passes(tmp_path):
    # fork=False: one process, the kernels loaded once.
    result = kvfuzz.check(vllm_cpu_engine.factory(HONEST), cases=40, seed=2, out=str(tmp_path), fork=False)
    assert result.passed, result.summary()
    assert result.cases == 40, result.summary()


def test_nan_in_a_blocks_unused_slots_reaches_the_row(tmp_path):
    fixture = os.path.join(FIXTURES, "vllm-nan-tail.json")
    result = kvfuzz.replay(fixture, vllm_cpu_engine.factory(["--library", "avx2"]), fork=False)
    assert not result.passed and "got nan" in result.summary(), result.summary()
    assert kvfuzz.replay(fixture, vllm_cpu_engine.factory(["--library", "avx2", "--finite-poison"]), fork=False).passed


def test_bf16_rows_are_truncated(tmp_path):
    fixture = os.path.join(FIXTURES, "vllm-bf16-truncated.json")
    result = kvfuzz.replay(fixture, vllm_cpu_engine.factory(["--library", "avx2", "--finite-poison"]), fork=False)
    assert not result.passed and "got 2.984375, expected 3," in result.summary(), result.summary()
    layout = json.load(open(fixture))["layout"]
    assert layout["dtype"] == "bf16"


class ListStore:
    """A pool of blocks as Python lists of slots, None for the poison: what BlockTables asks
    of a store, observable."""

    def __init__(self, block_size):
        self.block_size, self.blocks = block_size, []

    def grow(self, blocks):
        self.blocks += [[None] * self.block_size for _ in range(blocks - len(self.blocks))]

    def poison(self, block, slot):
        self.blocks[block][slot:] = [None] * (self.block_size - slot)

    def copy(self, src, dst, slots):
        self.blocks[dst][:slots] = self.blocks[src][:slots]


def fill(tables, store, seq, tokens):
    for slot, token in zip(tables.reserve(seq, len(tokens)), tokens):
        store.blocks[slot // store.block_size][slot % store.block_size] = token
    tables.advance(seq, len(tokens))


def read(tables, store, seq):
    bs = store.block_size
    return [store.blocks[tables.tables[seq][p // bs]][p % bs] for p in range(tables.lengths[seq])]


def test_block_tables_share_full_blocks_and_copy_partial_ones():
    store = ListStore(4)
    tables = BlockTables(3, 4, [0, 3, 1, 2], store, reserved=(0,))
    fill(tables, store, 0, list("abcdef"))  # one full block, one partial
    assert tables.tables[0] == [3, 1]  # page order, the reserved block skipped
    tables.fork(0, 1)
    assert tables.tables[1][0] == 3 and tables.refs[3] == 2  # the full block shared
    assert tables.tables[1][1] != 1  # the partial one copied
    fill(tables, store, 1, list("XY"))
    fill(tables, store, 0, list("gh"))
    assert read(tables, store, 0) == list("abcdefgh")
    assert read(tables, store, 1) == list("abcdefXY")
    # A truncate into the shared block copies it first, then poisons the dropped slots.
    tables.truncate(1, 2)
    assert tables.tables[1][0] != 3 and tables.refs[3] == 1
    assert read(tables, store, 1) == list("ab") and store.blocks[tables.tables[1][0]][2:] == [None, None]
    assert read(tables, store, 0) == list("abcdefgh")
    # A reset frees its blocks and poisons them; none is the reserved one.
    tables.reset(0)
    assert all(store.blocks[b] == [None] * 4 for b in (3, 1))
    assert 0 not in tables.free and tables.refs[0] == 0


def test_block_tables_grow_past_the_page_order():
    store = ListStore(2)
    tables = BlockTables(1, 2, [1, 0], store)
    fill(tables, store, 0, list(range(20)))  # 10 blocks, 4 at first
    assert read(tables, store, 0) == list(range(20))
    assert tables.tables[0][:2] == [1, 0] and sorted(tables.tables[0]) == list(range(10))


def test_the_pool_poisons_through_the_kernels_writer():
    """TorchPool writes the poison into dropped slots with cpu_attn_reshape_and_cache, so the
    kernel's own layout (K transposed inside a block) decides where it goes: a row that sees
    the kept tokens only is unchanged by it, one that would read a dropped slot is not."""
    import torch

    config = type("C", (), {"kv_heads": 1, "head_dim": 32})()
    pool = vllm_cpu_engine.TorchPool(config, 32, torch.float32, float("nan"), "vec")
    pool.grow(2)
    keys = torch.arange(32 * 32, dtype=torch.float32).reshape(32, 1, 32)
    pool.write(keys, keys, list(range(32, 64)))
    pool.poison(1, 5)
    assert torch.isnan(pool.value_cache[1, 0, 5:]).all() and not torch.isnan(pool.value_cache[1, 0, :5]).any()
    # K is transposed within the block: each of the 32 lanes holds slots 0..4 then NaN.
    k = pool.key_cache[1, 0].reshape(-1).view(32, 32)  # [lane][slot] as the kernel stores it
    assert torch.isnan(k[:, 5:]).all() and torch.equal(k[:, :5], keys[:5, 0].T)
    assert np.isnan(pool.kv[0].numpy()).all()  # block 0 untouched: all poison
