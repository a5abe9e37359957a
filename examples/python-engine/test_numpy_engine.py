"""kvfuzz's six properties against the numpy engine, in-process (the kvfuzz package's
pytest plugin): pytest examples/python-engine --kvfuzz-cases 100"""

import pytest

import kvfuzz
from numpy_engine import NumpyEngine


@pytest.mark.parametrize("prop", kvfuzz.PROPERTIES)
def test_numpy_engine(kvfuzz_check, prop):
    kvfuzz_check(NumpyEngine, properties=[prop])
