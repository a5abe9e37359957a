#!/usr/bin/env python3
"""What ONNX Runtime's GroupQueryAttention really computes, measured through the adapter:

    .venv/bin/python adapters/onnxruntime/measure_numerics.py [--dtype f16] [--rows 4000]

Random layouts (GQA, head sizes, windows, RoPE, scales) and chunk schedules (prefill,
chunked prefill over a past, decode), values in the kernel's dtype. Every output value is
compared with float64 attention over the same inputs, in ulps of the kernel's dtype at
the reference value, and with that reference rounded once to the dtype: if the kernel
accumulates in f32 and rounds only its output, nearly every value equals the rounded
reference and none is more than about half an ulp (plus f32 noise) away. Printed: the
distribution, the share equal to the rounded reference, the worst case.
"""

import argparse
import collections
import math
import os
import sys
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ort_common import NUMPY_DTYPES  # noqa: E402
from ort_gqa_engine import PATHS, ROPE_MODES, OrtGqaEngine, parse  # noqa: E402


def rotate(x, position, theta):
    """kvfuzz's RoPE in float64: NeoX half-split pairs (i, i + d/2), x[..., d]."""
    d = x.shape[-1]
    half = d // 2
    angles = position * theta ** (-2.0 * np.arange(half) / d)
    c, s = np.cos(angles), np.sin(angles)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def reference(config, qs, ks, vs, round_rotated_to=None):
    """Rows of every token of one request, float64: qs[t][h][d], ks[t][kv][d], vs[t][kv][e].
    round_rotated_to: the rotated q and k rounded to that numpy dtype first, as a kernel
    in that dtype receives them from the adapter (--rope adapter)."""
    tokens, group = len(qs), config.q_heads // config.kv_heads
    if config.rope_theta is not None:
        qs = np.stack([rotate(qs[t], t, config.rope_theta) for t in range(tokens)])
        ks = np.stack([rotate(ks[t], t, config.rope_theta) for t in range(tokens)])
        if round_rotated_to is not None:
            qs = qs.astype(round_rotated_to).astype(np.float64)
            ks = ks.astype(round_rotated_to).astype(np.float64)
    rows = np.zeros((tokens, config.q_heads, config.value_dim))
    for p in range(tokens):
        start = max(0, p - config.window + 1) if config.window else 0
        for h in range(config.q_heads):
            scores = config.scale * (ks[start : p + 1, h // group] @ qs[p, h])
            weights = np.exp(scores - scores.max())
            rows[p, h] = weights @ vs[start : p + 1, h // group] / weights.sum()
    return rows


def random_case(rng, dtype):
    kv_heads = int(rng.choice([1, 2]))
    q_heads = kv_heads * int(rng.choice([1, 2, 4]))
    rope = rng.random() < 0.4
    head_dim = int(rng.choice([2, 4, 8, 16, 32, 64] if rope else [1, 3, 8, 12, 16, 32, 64]))
    value_dim = head_dim if rng.random() < 0.7 else int(rng.choice([1, 5, 8, 16, 32]))
    scale = float(rng.choice([1 / math.sqrt(head_dim), 0.125, 1.0, 2.0]))
    config = SimpleNamespace(
        q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, value_dim=value_dim,
        page_size=16, dtype=dtype, scale=scale,
        rope_theta=float(rng.choice([10000.0, 500.0])) if rope else None,
        window=int(rng.integers(1, 24)) if rng.random() < 0.4 else None,
        sequences=1, page_order=[0], poison="nan",
    )  # fmt: skip
    tokens = int(rng.integers(1, 80))
    round_to = NUMPY_DTYPES[dtype]

    def data(heads, width, spread):
        return (rng.standard_normal((tokens, heads, width)) * spread).astype(round_to).astype(np.float64)

    qs, ks = data(q_heads, head_dim, 1.0), data(kv_heads, head_dim, 1.0)
    vs = data(kv_heads, value_dim, float(rng.choice([1.0, 8.0, 100.0])))
    return config, qs, ks, vs


def run(engine, config, qs, ks, vs, rng):
    """Feeds the request in random chunks (a first prefill, then chunks or decode)."""
    rows, done = [], 0
    while done < len(qs):
        size = int(rng.integers(1, len(qs) - done + 1)) if rng.random() < 0.5 else 1
        chunk = SimpleNamespace(seq=0, q=qs[done : done + size].tolist(),
                                k=ks[done : done + size].tolist(), v=vs[done : done + size].tolist())  # fmt: skip
        [(positions, out)] = engine.step([chunk])
        assert list(positions) == list(range(done, done + size)), positions
        rows.extend(out)
        done += size
    return np.array(rows)


def ulp(dtype, values):
    """The spacing of `dtype` at |values| (the subnormal spacing near zero)."""
    t = NUMPY_DTYPES[dtype]
    return np.spacing(np.abs(values).astype(t)).astype(np.float64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", choices=sorted(NUMPY_DTYPES), default="f16")
    parser.add_argument("--rows", type=int, default=4000, help="output rows to measure")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rope", choices=ROPE_MODES, help="who rotates q and k (default: by dtype)")
    parser.add_argument("--path", choices=PATHS, default="legacy", help="how the kernel is called")
    args = parser.parse_args()
    options = parse(["--dtype", args.dtype, "--path", args.path] + (["--rope", args.rope] if args.rope else []))
    rope = options.rope
    rng = np.random.default_rng(args.seed)
    t = NUMPY_DTYPES[args.dtype]
    rows = 0
    by_kind = collections.defaultdict(lambda: {"cases": 0, "ulps": [], "excess": [], "equal": 0})
    while rows < args.rows:
        config, qs, ks, vs = random_case(rng, args.dtype)
        got = run(OrtGqaEngine(config, options), config, qs, ks, vs, rng)
        want = reference(config, qs, ks, vs)
        kind = by_kind["rope" if config.rope_theta else "no rope"]
        kind["cases"] += 1
        kind["ulps"].append((np.abs(got - want) / ulp(args.dtype, want)).ravel())
        # What is left after half an ulp of rounding, in units of f32 noise: 2^-24 max |v|.
        noise = np.abs(vs).max() * 2.0**-24
        kind["excess"].append(((np.abs(got - want) - 0.5 * ulp(args.dtype, want)) / noise).ravel())
        kind["equal"] += int(np.sum(got == want.astype(t).astype(np.float64)))
        if config.rope_theta is not None and rope == "adapter":
            # What the kernel itself is given: the rotated q and k rounded to its dtype.
            given = reference(config, qs, ks, vs, round_rotated_to=t)
            kind["given_equal"] = kind.get("given_equal", 0) + int(np.sum(got == given.astype(t)))
            kind.setdefault("given_ulps", []).append((np.abs(got - given) / ulp(args.dtype, given)).ravel())
        rows += got.shape[0] * got.shape[1]
    print(f"onnxruntime {ort.__version__}, {args.dtype} kernel, rope by {rope}, {rows} rows")
    for name, kind in sorted(by_kind.items()):
        ulps, excess = np.concatenate(kind["ulps"]), np.concatenate(kind["excess"])
        print(f"{name}: {kind['cases']} cases, {ulps.size} values")
        print(f"  equal to the {args.dtype} rounding of the float64 reference: "
              f"{100.0 * kind['equal'] / ulps.size:.3f}%")  # fmt: skip
        quantiles = ", ".join(f"p{q} {np.percentile(ulps, q):.3g}" for q in (50, 90, 99, 99.9, 100))
        print(f"  |got - reference| in {args.dtype} ulps of the reference: {quantiles}")
        print(f"  values more than half an ulp off: {int(np.sum(ulps > 0.5))}; beyond that, "
              f"worst {excess.max():.3g} x 2^-24 max|v|")  # fmt: skip
        if "given_ulps" in kind:
            given = np.concatenate(kind["given_ulps"])
            quantiles = ", ".join(f"p{q} {np.percentile(given, q):.3g}" for q in (50, 90, 99, 99.9, 100))
            print(f"  against float64 attention on the rotated q and k rounded to {args.dtype} (what "
                  f"the kernel is given): equal to its rounding {100.0 * kind['given_equal'] / given.size:.3f}%, "
                  f"{quantiles}")  # fmt: skip


if __name__ == "__main__":
    main()
