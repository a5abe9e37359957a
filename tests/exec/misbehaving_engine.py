#!/usr/bin/env python3
"""An engine that breaks the protocol (or the process contract) in one chosen way, for
tests/test_exec.cpp:

    python3 misbehaving_engine.py MODE [ARG]

It answers like the honest example engine except where MODE says otherwise. Its own loop,
not kvfuzz_engine.serve(), so that it can fail below the protocol (exit, hang, crash).
"""

import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python-engine"))

from honest_engine import HonestEngine  # noqa: E402
from kvfuzz_engine import answer  # noqa: E402

MODE = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else None


def write(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def misbehave_on_hello(reply):
    """A changed hello reply, or None to send it as it is."""
    if MODE == "protocol2":
        return dict(reply, protocol=2)
    if MODE == "no-name":
        return {key: value for key, value in reply.items() if key != "name"}
    if MODE == "refuse-hello":
        return {"ok": False, "error": "no GPU found"}
    return None


def misbehave_on_step(reply):
    """Does what MODE says on a step; returns the reply to send (None: send nothing)."""
    if MODE == "garbage":
        write("this is not json\n")
        return None
    if MODE == "exit":
        sys.stderr.write("engine: out of memory, giving up\n")
        sys.exit(3)
    if MODE == "hang":
        time.sleep(3600)
    if MODE == "grandchild":  # a child of its own that must die with it
        child = subprocess.Popen(["sleep", "300"])
        with open(ARG, "w") as f:
            f.write(str(child.pid))
        time.sleep(3600)
    if MODE == "traceback":
        raise ValueError("kaboom in step")
    if MODE == "signal":
        os.kill(os.getpid(), signal.SIGSEGV)
    if MODE == "cut-short":
        write('{"ok": true, "chu')
        sys.exit(0)
    if MODE == "endless":
        while True:
            write("x" * 65536)
    if MODE == "error":
        return {"ok": False, "error": "out of KV blocks (pool exhausted)"}
    if MODE == "rows":
        reply["chunks"][0]["out"].pop()
    if MODE == "positions-float":
        reply["chunks"][0]["positions"] = [float(p) for p in reply["chunks"][0]["positions"]]
    if MODE == "value-string":
        reply["chunks"][0]["out"][0][0][0] = "1.5"
    if MODE in ("nan", "infinity", "null"):  # json.dumps writes NaN, Infinity and null
        value = {"nan": float("nan"), "infinity": float("inf"), "null": None}[MODE]
        reply["chunks"][0]["out"][0][0][0] = value
    if MODE == "two-lines":  # in one write, so that kvfuzz reads both at once
        write(json.dumps(reply) + "\n" + json.dumps({"debug": "done"}) + "\n")
        return None
    if MODE == "stderr-flood":  # far more than a pipe holds, before and after the reply
        sys.stderr.write("noise " * 50000 + "\n")
    return reply


def main():
    engine = None
    for line in sys.stdin:
        request = json.loads(line)
        engine, reply = answer(engine, HonestEngine, request)
        if request["op"] == "hello":
            reply = misbehave_on_hello(reply) or reply
        elif request["op"] == "step":
            reply = misbehave_on_step(reply)
        if reply is not None:
            write(json.dumps(reply) + "\n")
        if MODE == "exit-after-hello":  # gone before the next request is written
            sys.exit(4)
        if MODE == "stderr-flood":
            sys.stderr.write("more noise " * 50000 + "\n")
    if MODE == "ignore-eof":  # never exits on its own
        time.sleep(3600)


if __name__ == "__main__":
    main()
