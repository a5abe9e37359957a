"""Engine reuse: an engine class with new_case(config) is built a few times per run, not
about 11 times per case (issue 26: construction was 35% of a transformers engine's time),
and kvfuzz still judges every case on a clean engine: a new_case that forgets to clear the
cache is a finding."""

import kvfuzz
from numpy_engine import NumpyEngine


class Reused(NumpyEngine):
    """The numpy engine, counting how often it is built and handed a new case."""

    built = 0
    cases = 0

    def __init__(self, config):
        type(self).built += 1
        super().__init__(config)

    def new_case(self, config):
        type(self).cases += 1
        self.config = config
        self.sequences = [self._empty() for _ in range(config.sequences)]


class LeakyReuse(Reused):
    """new_case keeps the old sequences when the count matches: a cache leaks into the
    next case (or variant)."""

    def new_case(self, config):
        type(self).cases += 1
        if len(self.sequences) != config.sequences:
            self.sequences = [self._empty() for _ in range(config.sequences)]
        self.config = config


def test_an_engine_with_new_case_is_built_a_few_times_and_still_passes(tmp_path):
    Reused.built = Reused.cases = 0
    result = kvfuzz.check(Reused, cases=20, fork=False, out=str(tmp_path))
    assert result.passed, result.summary()
    # About 11 engines a case for the six properties: all but a handful are new_case calls.
    assert Reused.built <= 4, Reused.built
    assert Reused.cases >= 150, Reused.cases


def test_a_new_case_that_keeps_the_cache_is_a_finding(tmp_path):
    result = kvfuzz.check(LeakyReuse, cases=20, fork=False, out=str(tmp_path))
    assert not result.passed and result.findings, result.summary()


def test_the_result_carries_rows_unjudged_and_the_bound_used(tmp_path):
    result = kvfuzz.check(NumpyEngine, cases=10, fork=False, out=str(tmp_path), properties="prefix")
    assert result.passed and result.rows > 100 and result.unjudged == 0, result.summary()
    assert 0 < result.bound_used < 1, result.bound_used
    assert f"{result.rows} rows (0 unjudged)" in result.summary()
