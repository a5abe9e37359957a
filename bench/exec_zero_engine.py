#!/usr/bin/env python3
"""The cheapest engine the protocol allows, for bench/bench_exec_protocol.cpp: it parses
every request and answers every row with zeros at the right positions, so what the
benchmark measures is the protocol (pipes, JSON both ways, Python's loop), not attention.
Standard library only; not a correct engine."""

import json
import sys


def main():
    positions = []
    value_zeros = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "hello":
            layout = request["layout"]
            positions = [0] * request["sequences"]
            value_zeros = [[0.0] * layout["value_dim"] for _ in range(layout["q_heads"])]
            reply = {"ok": True, "protocol": 1, "name": "zero", "capabilities": {}}
        elif op == "step":
            chunks = []
            for chunk in request["chunks"]:
                seq, tokens = chunk["seq"], len(chunk["q"])
                start = positions[seq]
                positions[seq] += tokens
                chunks.append(
                    {"positions": list(range(start, start + tokens)), "out": [value_zeros] * tokens}
                )
            reply = {"ok": True, "chunks": chunks}
        else:  # reset
            positions[request["seq"]] = 0
            reply = {"ok": True}
        sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
