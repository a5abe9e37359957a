#!/usr/bin/env python3
"""An engine that breaks the protocol (or the process contract) in one chosen way, for
tests/doors/test_exec.cpp:

    python3 misbehaving_engine.py MODE [ARG]

It answers like the honest example engine except where MODE says otherwise. Its own loop,
not kvfuzz.exec_server.serve(), so that it can fail below the protocol (exit, hang, crash).

It speaks protocol version 1 only (one process per engine). "v2-MODE" is MODE speaking
versions 1 and 2 (one process serves many cases, with new_case between them); the modes
"...-new-case" misbehave on new_case. With KVFUZZ_TEST_PID_LOG set, each process appends
its pid to that file when it starts, so that a test can count the processes it started.
"""

import json
import os
import select
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
# kvfuzz.exec_server by itself, the checkout's (standard library only: the python3 running
# this need not have the package; python/kvfuzz/exec_server.py says why).
sys.path[:0] = [os.path.join(ROOT, "examples", "python-engine"),
                os.path.join(ROOT, "python", "kvfuzz")]

from exec_server import Session  # noqa: E402
from honest_engine import HonestEngine  # noqa: E402

MODE = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else None
PROTOCOLS = (1,)
if MODE.startswith("v2-"):
    MODE, PROTOCOLS = MODE[len("v2-"):], (1, 2)


def write(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def write_bytes(data):
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def next_float32(value):
    """The float32 after `value` rounded to float32 (positive direction), through lists."""
    if isinstance(value, list):
        return [next_float32(v) for v in value]
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return value
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    step = 1 if bits < 0x80000000 else -1  # negative floats: toward zero is up
    if bits == 0x80000000:
        bits, step = 0, 1  # -0: the next one up is the smallest positive
    return struct.unpack("<f", struct.pack("<I", bits + step))[0]


# Declarations (hello's "numerics" and "supports") by mode: every field, a few, or one
# malformed value each.
DECLARED_NUMERICS = {
    "output": "bf16",
    "p": "bf16",
    "score_accumulation": "f16",
    "value_accumulation": "f16",
    "rotated_keys_in_storage": True,
    "rotated_queries_in_storage": True,
    "rope_angles_exact": True,
    "exp_ulps": 1024,
}
DECLARED_SUPPORTS = {
    "dtypes": ["bf16", "f16"],
    "head_dim_multiple": 8,
    "max_head_dim": 256,
    "max_q_heads": 64,
    "max_context": 4096,
    "value_dim_is_head_dim": True,
    "rope_required": True,
    "windows": False,
}
DECLARATIONS = {
    "declares-all": {"numerics": DECLARED_NUMERICS, "supports": DECLARED_SUPPORTS},
    "declares-some": {"numerics": {"p": "none", "rotated_keys_in_storage": False},
                      "supports": {"max_context": 100}},
    "numerics-list": {"numerics": ["bf16"]},
    "numerics-bad-dtype": {"numerics": {"output": "fp8"}},
    "numerics-output-number": {"numerics": {"output": 3}},
    "numerics-unknown-p": {"numerics": {"p": "f64"}},
    "numerics-f32-p": {"numerics": {"p": "f32"}},
    "numerics-bf16-accumulation": {"numerics": {"value_accumulation": "bf16"}},
    "numerics-rotated-null": {"numerics": {"rotated_keys_in_storage": None}},
    "numerics-exp-ulps-0": {"numerics": {"exp_ulps": 0}},
    "numerics-misspelt": {"numerics": {"ouptut": "bf16"}},
    "supports-empty-dtypes": {"supports": {"dtypes": []}},
    "supports-dtype-twice": {"supports": {"dtypes": ["f16", "bf16", "f16"]}},
    "supports-head-dim-multiple-0": {"supports": {"head_dim_multiple": 0}},
    "supports-negative-context": {"supports": {"max_context": -1}},
    "supports-float-heads": {"supports": {"max_q_heads": 8.0}},
}


class DeclaringEngine(HonestEngine):
    """The honest engine with declarations on the class, which kvfuzz.exec_server sends in hello."""

    numerics = {"output": "f16", "score_accumulation": "f16"}
    supports = {"dtypes": ["f16"], "max_q_heads": 4}


def misbehave_on_hello(reply):
    """A changed hello reply, or None to send it as it is."""
    if MODE in DECLARATIONS:
        return dict(reply, **DECLARATIONS[MODE])
    if MODE == "no-optional-ops":  # announces neither truncate nor fork
        return dict(reply, capabilities={"truncate": False, "fork": False})
    if MODE == "capabilities-list":
        return dict(reply, capabilities=["truncate", "fork"])
    if MODE == "capabilities-string":
        return dict(reply, capabilities={"truncate": "yes"})
    if MODE in ("claims-bitwise", "claims-bitwise-batch-variant"):
        return dict(reply, bitwise={"batch": True, "schedule": True, "layout": True, "poison": True})
    if MODE == "bitwise-string":
        return dict(reply, bitwise={"batch": "yes"})
    if MODE == "protocol2":  # whatever kvfuzz offered
        return dict(reply, protocol=2)
    if MODE == "protocol3":
        return dict(reply, protocol=3)
    if MODE == "no-name":
        return {key: value for key, value in reply.items() if key != "name"}
    if MODE == "refuse-hello":
        return {"ok": False, "error": "no GPU found"}
    return None


def misbehave_on_new_case(reply):
    """Does what a v2 MODE says on a new_case; returns the reply to send."""
    if MODE == "refuse-new-case":
        return {"ok": False, "error": "cannot start another case"}
    if MODE == "new-case-changes-supports":
        return dict(reply, supports={"max_context": 100})
    if MODE == "new-case-changes-capabilities":
        return dict(reply, capabilities={"truncate": True, "fork": False})
    if MODE == "new-case-no-name":
        return {key: value for key, value in reply.items() if key != "name"}
    if MODE == "new-case-protocol-1":
        return dict(reply, protocol=1)
    if MODE == "exit-on-new-case":
        sys.stderr.write("engine: only one case per process\n")
        sys.exit(5)
    return reply


def misbehave_on_step(reply):
    """Does what MODE says on a step; returns the reply to send (None: send nothing)."""
    if MODE in ("batch-variant", "claims-bitwise-batch-variant") and len(reply.get("chunks", [])) > 1:
        # In a batch of several sequences every value moves to the next float32 up: far
        # inside the tolerance, but not the same bits as the sequence alone.
        for chunk in reply["chunks"]:
            chunk["out"] = next_float32(chunk["out"])
        return reply
    if MODE == "garbage":
        write("this is not json\n")
        return None
    if MODE == "invalid-utf8":  # bytes that are no UTF-8, then text cut inside a character
        garbage = b"\xff\xfe \xc3\x28 \xed\xa0\x80 \xf4\x90\x80\x80 "
        write_bytes(garbage + "x\u00e9".encode() * 60 + b"\n")
        return None
    if MODE == "stderr-multibyte":
        # A line longer than kvfuzz keeps, of 3-byte characters, so that a cut in bytes would
        # split one; a character written in two pieces with a pause between; stray bytes.
        err = sys.stderr.buffer
        err.write(("x" + "\u20ac" * 300 + "\n").encode())
        err.write("split: \u20ac".encode()[:-1])
        err.flush()
        time.sleep(0.2)
        err.write("\u20ac".encode()[-1:] + b" end\n")
        err.write(b"stray \x80\xff bytes \xe2\x82\n")
        err.flush()
        sys.exit(3)
    if MODE == "error-multibyte":  # an error message past kvfuzz's 500 characters
        return {"ok": False, "error": "x" + "\u00e9" * 600}
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


def wait_for_go():
    """For "unasked": waits until the test, which has its hello reply, creates ARG.go.
    False when kvfuzz writes or closes stdin first (the engine resolve starts and ends)."""
    while not os.path.exists(ARG + ".go"):
        if select.select([sys.stdin], [], [], 0.02)[0]:
            return False
    return True


def early_answer():
    """Answers hello, then answers the next request having read only its first bytes."""
    received = b""
    while b"\n" not in received:
        data = os.read(0, 65536)
        if not data:
            return
        received += data
    reply = Session(HonestEngine, PROTOCOLS).answer(json.loads(received.split(b"\n", 1)[0]))
    write(json.dumps(reply) + "\n")
    if not os.read(0, 100):
        return
    write(json.dumps({"ok": True}) + "\n")
    time.sleep(3600)


def main():
    if MODE == "early-answer":
        early_answer()
        return
    if os.environ.get("KVFUZZ_TEST_PID_LOG"):
        with open(os.environ["KVFUZZ_TEST_PID_LOG"], "a") as f:
            f.write(f"{os.getpid()}\n")
    engine_class = DeclaringEngine if MODE == "declares-on-class" else HonestEngine
    session = Session(engine_class, PROTOCOLS)
    for line in sys.stdin:
        request = json.loads(line)
        reply = session.answer(request)
        if request["op"] == "new_case":
            reply = misbehave_on_new_case(reply)
        elif request["op"] == "hello":
            reply = misbehave_on_hello(reply) or reply
            if MODE == "linger":  # a child, found by ARG on its command line
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", ARG])
        elif request["op"] == "step":
            reply = misbehave_on_step(reply)
        elif MODE == "no-optional-ops" and request["op"] in ("truncate", "fork"):
            op = request["op"]
            reply = {"ok": False, "error": f"kvfuzz sent {op}, which hello did not announce"}
        if reply is not None:
            write(json.dumps(reply) + "\n")
        if MODE == "unasked" and request["op"] == "hello" and wait_for_go():
            write(json.dumps({"debug": "unasked"}) + "\n")
            open(ARG + ".done", "w").close()  # the test waits for this before it sends a step
        if MODE == "exit-after-hello":  # gone before the next request is written
            sys.exit(4)
        if MODE == "exit-after-step" and request["op"] == "step":  # dies between cases
            time.sleep(0.05)
            sys.exit(6)
        if MODE == "stderr-flood":
            sys.stderr.write("more noise " * 50000 + "\n")
    if MODE in ("ignore-eof", "linger"):  # never exits on its own
        time.sleep(3600)


if __name__ == "__main__":
    main()
