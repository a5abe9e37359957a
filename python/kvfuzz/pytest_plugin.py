"""The pytest plugin (entry point pytest11 `kvfuzz`): the `kvfuzz_check` fixture runs
kvfuzz.check on an engine and fails the test with every finding, its shrunk fixture's
path and the one-line command that replays it.

    from my_engine import MyEngine

    def test_my_engine(kvfuzz_check):
        kvfuzz_check(MyEngine)

Options: --kvfuzz-cases N (default 50), --kvfuzz-seed S (default 1), --kvfuzz-out DIR
(default kvfuzz-out under pytest's rootdir), --kvfuzz-shrink-seconds S (default 30),
--kvfuzz-max-tokens N (default 0: the generator's sizes), --kvfuzz-jobs N (default 1: worker
processes), --kvfuzz-timeout S (default 600 s per case), --kvfuzz-no-fork (judge in pytest's
own process: no crash isolation, for a debugger), --kvfuzz-max-failures N, --kvfuzz-ignore
SIGNATURE and --kvfuzz-known FIXTURE|DIR (repeatable: a known bug set aside while the run
looks for others). A crash or a hang of the engine fails the test with its raw
fixture, case seed and replay command; pytest goes on.
"""

from __future__ import annotations

import os

import pytest

import kvfuzz


def pytest_addoption(parser):
    group = parser.getgroup("kvfuzz", "kvfuzz: properties of KV-cached attention engines")
    group.addoption("--kvfuzz-cases", type=int, default=50, help="cases per kvfuzz_check (50)")
    group.addoption("--kvfuzz-seed", type=int, default=1, help="seed of the run (1)")
    group.addoption(
        "--kvfuzz-out", default=None, help="folder for failing fixtures (ROOTDIR/kvfuzz-out)"
    )
    group.addoption(
        "--kvfuzz-shrink-seconds", type=float, default=30.0, help="time to shrink each failure (30)"
    )
    group.addoption(
        "--kvfuzz-max-tokens",
        type=int,
        default=0,
        help="at most this many tokens per sequence and request (default: up to 160; above "
        "160, long contexts)",
    )

    group.addoption("--kvfuzz-jobs", type=int, default=1, help="worker processes per kvfuzz_check (1)")
    group.addoption(
        "--kvfuzz-timeout", type=float, default=600.0, help="seconds one case may take (600)"
    )
    group.addoption(
        "--kvfuzz-no-fork",
        action="store_true",
        help="judge in pytest's process: no crash isolation or timeout (for a debugger)",
    )
    group.addoption(
        "--kvfuzz-max-failures",
        type=int,
        default=None,
        help="distinct findings before the engine is no longer run (one per property)",
    )
    group.addoption(
        "--kvfuzz-ignore", action="append", default=[], help="a finding's signature to set aside"
    )
    group.addoption(
        "--kvfuzz-known",
        action="append",
        default=[],
        help="a fixture or folder of known bugs: replayed, and set aside when found again",
    )


@pytest.fixture
def kvfuzz_check(request):
    """kvfuzz_check(factory, properties=None, **check_options) -> kvfuzz.CheckResult; fails
    the test when the engine breaks a property. Options given here win over the command
    line's."""
    config = request.config
    out = config.getoption("kvfuzz_out") or os.path.join(str(config.rootpath), "kvfuzz-out")
    # Under pytest-xdist (`-n N`) each worker writes to a folder of its own (OUT/gw0, ...):
    # two workers checking the same engine and seed would otherwise write the same names.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        out = os.path.join(out, worker)

    def run(engine_factory, properties=None, **options):
        options.setdefault("cases", config.getoption("kvfuzz_cases"))
        options.setdefault("seed", config.getoption("kvfuzz_seed"))
        options.setdefault("out", out)
        options.setdefault("shrink_seconds", config.getoption("kvfuzz_shrink_seconds"))
        options.setdefault("max_tokens", config.getoption("kvfuzz_max_tokens"))
        options.setdefault("jobs", config.getoption("kvfuzz_jobs"))
        options.setdefault("timeout", config.getoption("kvfuzz_timeout"))
        options.setdefault("fork", not config.getoption("kvfuzz_no_fork"))
        options.setdefault("max_failures", config.getoption("kvfuzz_max_failures"))
        options.setdefault("ignore", config.getoption("kvfuzz_ignore"))
        options.setdefault("known", config.getoption("kvfuzz_known"))
        result = kvfuzz.check(engine_factory, properties=properties, **options)
        if not result.passed:
            pytest.fail(result.summary(), pytrace=False)
        return result

    return run
