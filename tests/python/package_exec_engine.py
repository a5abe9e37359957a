#!/usr/bin/env python3
"""An exec engine written as a user's would be, against the installed package: the honest
example's class, served by `from kvfuzz.exec_server import serve`. For the ctest
python_exec_server_check (tests/python/CMakeLists.txt), which runs it through the exec door:

    kvfuzz check --engine "exec:.venv/bin/python tests/python/package_exec_engine.py"
"""

import os
import sys

from kvfuzz.exec_server import serve

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python-engine"))

from honest_engine import HonestEngine  # noqa: E402


class PackageServedEngine(HonestEngine):
    name = "honest-python (kvfuzz.exec_server)"


if __name__ == "__main__":
    serve(PackageServedEngine)
