#!/usr/bin/env python3
"""What a `kvfuzz check --cases N --seed S` of an adapter exercises, counted from the very
scenarios check draws (case i is kvfuzz.generate(kvfuzz.case_seed(S, i), engine), within
the engine's declarations), so "no discrepancy in N cases" says what was tried:

    .venv/bin/python adapters/onnxruntime/coverage.py --cases 2000 --seed 1 \
        ort_gqa_engine.py --dtype f32 --path batched

Needs the kvfuzz Python package in the environment (docs/python.md). Prints GQA groups,
head dims, windows, RoPE, scales, dtypes, steps and their batch sizes, resets, truncates,
forks and context lengths, as one JSON object.
"""

import argparse
import collections
import importlib
import json
import os
import sys

import kvfuzz

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def histogram(counter):
    return {str(k): v for k, v in sorted(counter.items(), key=lambda kv: (isinstance(kv[0], str), kv[0]))}


def coverage(scenarios):
    c = collections.defaultdict(collections.Counter)
    totals = collections.Counter()
    for scenario in scenarios:
        fixture = json.loads(scenario.to_json())
        layout = fixture["layout"]
        c["group"][layout["q_heads"] // layout["kv_heads"]] += 1
        c["kv_heads"][layout["kv_heads"]] += 1
        c["head_dim"][layout["head_dim"]] += 1
        c["dtype"][layout["dtype"]] += 1
        c["rope"]["on" if layout.get("rope_theta") else "off"] += 1
        c["window"][layout.get("window", "none")] += 1
        c["scale"]["explicit" if "scale" in layout else "default"] += 1
        c["sequences"][fixture["sequences"]] += 1
        lengths = collections.Counter()
        longest = 0
        for op in fixture["program"]:
            kind = op["op"]
            totals[kind] += 1
            if kind == "append":
                lengths[op["seq"]] += len(op["tokens"])
            elif kind == "step":
                c["step_chunks"][len(op["chunks"])] += 1
                for chunk in op["chunks"]:
                    lengths[chunk["seq"]] += len(chunk["tokens"])
            elif kind == "reset":
                lengths[op["seq"]] = 0
            elif kind == "truncate":
                lengths[op["seq"]] = op["keep"]
            elif kind == "fork":
                lengths[op["dst"]] = lengths[op["src"]]
            longest = max([longest, *lengths.values()])
        width = 32 if longest <= 160 else 512  # bins of 32 tokens, of 512 for long contexts
        c["context"][(longest - 1) // width * width + width if longest else 0] += 1  # a bin's upper bound
    report = {"cases": len(scenarios), "ops": dict(totals)}
    report |= {name: histogram(counter) for name, counter in sorted(c.items())}
    report["context"] = {f"<= {k}": v for k, v in report["context"].items()}
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=0, help="as check's --max-tokens (0: default sizes)")
    parser.add_argument("adapter", help="the adapter's file in this folder, e.g. ort_gqa_engine.py")
    parser.add_argument("flags", nargs=argparse.REMAINDER, help="the adapter's flags")
    args = parser.parse_args()
    module = importlib.import_module(os.path.splitext(os.path.basename(args.adapter))[0])
    factory = module.factory(args.flags)
    seeds = [kvfuzz.case_seed(args.seed, i) for i in range(args.cases)]
    scenarios = [kvfuzz.generate(seed, factory, max_tokens=args.max_tokens) for seed in seeds]
    print(json.dumps(coverage(scenarios), indent=1))


if __name__ == "__main__":
    main()
