"""Fixtures on disk: load, save, find, and the corpus that ships with the package."""

from __future__ import annotations

import os
from typing import List, Union

from kvfuzz import _kvfuzz

PathLike = Union[str, "os.PathLike[str]"]


def corpus_path() -> str:
    """The installed corpus (seeds/ written by hand, regressions/ by the shrinker, model/)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def load_fixture(path: PathLike) -> _kvfuzz.Scenario:
    """The scenario a fixture file holds; kvfuzz.FixtureError (a ValueError) names the file,
    the JSON path and what was expected."""
    return _kvfuzz.Scenario.load(os.fspath(path))


def save_fixture(scenario: _kvfuzz.Scenario, path: PathLike) -> str:
    """Writes `scenario` canonically (through a temporary file and a rename)."""
    _kvfuzz.Scenario.save(scenario, os.fspath(path))
    return os.fspath(path)


def fixtures(path: PathLike) -> List[str]:
    """`path` itself when it is a file, else every *.json below it, sorted."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return _kvfuzz.fixtures_below(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such fixture or directory")
    return [path]
