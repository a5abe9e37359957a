"""kvfuzz.exec_server, the exec protocol's loop, is part of the package and in one place:
the installed package exposes it; the file works by itself, in an interpreter that cannot
import the package (what the examples, the ONNX Runtime adapter and the exec door's test
engines rely on); no copy is left in examples/ and nothing imports one from there. That an
engine written against the package passes kvfuzz check is the ctest
python_exec_server_check (package_exec_engine.py)."""

import ast
import json
import os
import re
import subprocess
import sys

import kvfuzz
import kvfuzz.exec_server
from conftest import EXAMPLES, ROOT

SOURCE = os.path.join(ROOT, "python", "kvfuzz", "exec_server.py")
HELLO = {
    "op": "hello",
    "protocol": 1,
    "protocols": [1, 2],
    "layout": {"q_heads": 1, "kv_heads": 1, "head_dim": 2, "value_dim": 1, "page_size": 16,
               "dtype": "f32", "scale": 1.0, "rope_theta": None, "window": None},
    "sequences": 1,
    "page_order": [0],
    "poison": "nan",
}
STEP = {"op": "step", "chunks": [{"seq": 0, "q": [[[1.0, 0.0]]], "k": [[[1.0, 0.0]]], "v": [[[0.5]]]}]}


def converse(command, cwd=None):
    """Sends hello and one step to an exec engine's command; returns its replies, parsed."""
    requests = json.dumps(HELLO) + "\n" + json.dumps(STEP) + "\n"
    done = subprocess.run(command, input=requests, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_installed_package_exposes_exec_server():
    module = kvfuzz.exec_server
    assert os.path.dirname(module.__file__) == os.path.dirname(kvfuzz.__file__)
    for name in ("serve", "Session", "Config", "Chunk", "config_from_hello", "declarations"):
        assert callable(getattr(module, name)), name
    assert module.PROTOCOLS == (1, 2)
    # Documented: how an engine uses it, through the package and by itself.
    assert "from kvfuzz.exec_server import serve" in module.__doc__
    assert "from exec_server import serve" in module.__doc__


def test_the_module_imports_nothing_of_kvfuzz():
    # What lets it load by itself: no import of the package, no relative import.
    for path in (SOURCE, kvfuzz.exec_server.__file__):
        with open(path) as f:
            tree = ast.parse(f.read())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: a relative import"
                imported.add(node.module)
        assert "json" in imported, (path, imported)
        assert not [name for name in imported if name.split(".")[0] == "kvfuzz"], (path, imported)


def test_the_installed_file_serves_by_itself_without_site_packages(tmp_path):
    # -S: no site-packages, so neither kvfuzz nor its extension can be imported: a plain python3.
    folder = os.path.dirname(kvfuzz.exec_server.__file__)
    engine = tmp_path / "echo_engine.py"
    engine.write_text(
        "import sys\n"
        f"sys.path.insert(0, {folder!r})\n"
        "from exec_server import serve\n"
        "class Echo:\n"
        "    def __init__(self, config): pass\n"
        "    def step(self, chunks): return [([0], c.v) for c in chunks]\n"
        "    def reset(self, seq): pass\n"
        "assert 'kvfuzz' not in sys.modules\n"
        "serve(Echo)\n"
    )
    hello, step = converse([sys.executable, "-S", "-B", str(engine)])
    assert hello["ok"] and hello["protocol"] == 2 and hello["name"] == "Echo", hello
    assert step == {"ok": True, "chunks": [{"positions": [0], "out": [[[0.5]]]}]}, step


def test_the_example_engine_runs_from_the_checkout_without_the_package(tmp_path):
    # As the exec door's tests run it: a python3 that has no kvfuzz (here -S), from any folder.
    command = [sys.executable, "-S", "-B", os.path.join(EXAMPLES, "honest_engine.py")]
    hello, step = converse(command, cwd=tmp_path)
    assert hello["ok"] and hello["capabilities"] == {"truncate": True, "fork": True}, hello
    assert step == {"ok": True, "chunks": [{"positions": [0], "out": [[[0.5]]]}]}, step


def test_one_copy_and_nothing_reaches_into_examples_for_it():
    assert not os.path.exists(os.path.join(EXAMPLES, "kvfuzz_engine.py"))
    assert not [name for name in os.listdir(EXAMPLES) if name.startswith("exec_server")]
    old_import = re.compile(r"^\s*(import|from)\s+kvfuzz_engine\b", re.M)
    ort = os.path.join(ROOT, "adapters", "onnxruntime")
    for folder in (EXAMPLES, ort, os.path.join(ROOT, "tests", "doors", "exec"), os.path.dirname(__file__)):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    text = f.read()
                assert not old_import.search(text), os.path.join(folder, name)
                if folder == ort:  # the adapter no longer puts examples/ on sys.path
                    assert "examples" not in text, os.path.join(folder, name)
