"""Engines as the harness takes them: a Python factory (usually the engine class itself,
called with a kvfuzz.EngineConfig) or a built-in C++ engine, and the spec that names a
factory on a command line (`module:attr` or `path/to/file.py:attr`)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Optional, Union

from kvfuzz import _kvfuzz
from kvfuzz._inputs import preload

EngineLike = Union[Callable[[Any], Any], "_kvfuzz.Engine"]


def engine(factory: EngineLike, name: Optional[str] = None) -> _kvfuzz.Engine:
    """The harness's handle of `factory` (returned as it is when it is one already).

    `factory(config)` makes one engine for a kvfuzz.EngineConfig; the harness makes one per
    case, per property variant and per shrink candidate, so engines never share state.
    `name` (default: "python:" and the factory's qualified name) goes into reports,
    provenance and fixture file names."""
    if isinstance(factory, _kvfuzz.Engine):
        return factory
    if not callable(factory):
        raise TypeError(
            f"engine factory: expected a callable (an engine class), got {type(factory).__name__}"
        )
    if name is None:
        name = "python:" + getattr(factory, "__qualname__", type(factory).__name__)
    preload(factory)  # torch, for an engine asking for torch inputs, before any fork
    return _kvfuzz.python_engine(factory, name)


def builtin_engine(name: str) -> _kvfuzz.Engine:
    """One of kvfuzz's own C++ engines or mutants by name (builtin_engines())."""
    return _kvfuzz.builtin_engine(name)


def builtin_engines() -> list:
    """The built-in engines' names, honest ones first."""
    return _kvfuzz.builtin_engines()


def factory_spec(factory: Any) -> Optional[str]:
    """`/abs/path.py:Attr` for a factory defined at the top of a file (absolute, so that a
    printed command runs from any folder), `module:Attr` for one of an installed module, or
    None when it cannot be imported by name (defined inside a function, a lambda)."""
    qualname = getattr(factory, "__qualname__", None)
    module_name = getattr(factory, "__module__", None)
    if not qualname or not module_name or "<" in qualname:
        return None
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if path and (module_name == "__main__" or _outside_site_packages(path)):
        return f"{os.path.abspath(path)}:{qualname}"
    if module_name == "__main__":
        return None
    return f"{module_name}:{qualname}"


def _outside_site_packages(path: str) -> bool:
    return "site-packages" not in path and "dist-packages" not in path


def load_factory(spec: str) -> Any:
    """The object `spec` names: `module:attr` (imported as Python imports it) or
    `path/to/file.py:attr` (loaded from the file, its folder first on sys.path so that it
    can import its neighbours). Raises ValueError with one line naming the spec."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ValueError(f"--engine {spec}: expected MODULE:ATTR or FILE.py:ATTR")
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                raise ValueError(f"--engine {spec}: no such file {where}")
            folder = os.path.dirname(os.path.abspath(where))
            if folder not in sys.path:
                sys.path.insert(0, folder)
            module_name = os.path.splitext(os.path.basename(where))[0]
            module = sys.modules.get(module_name)
            if module is None or os.path.abspath(getattr(module, "__file__", "")) != os.path.abspath(where):
                loader = importlib.util.spec_from_file_location(module_name, where)
                module = importlib.util.module_from_spec(loader)
                sys.modules[module_name] = module
                loader.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except ValueError:
        raise
    except Exception as error:
        raise ValueError(f"--engine {spec}: cannot import {where}: {type(error).__name__}: {error}")
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"--engine {spec}: {where} has no attribute {attr}")
        target = getattr(target, part)
    return target
