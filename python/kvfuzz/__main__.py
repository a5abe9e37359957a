"""python -m kvfuzz replay|shrink|check ... --engine MODULE:ATTR|FILE.py:ATTR

The commands a failure prints, for an engine written in Python: the engine factory is
imported by name. Exit status as the kvfuzz command's: 0 pass, 1 a failure, 2 bad input."""

from __future__ import annotations

import argparse
import sys

import kvfuzz
from kvfuzz._engines import load_factory


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvfuzz", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    engine_help = "the engine factory: MODULE:ATTR or FILE.py:ATTR (usually the engine class)"

    replay = commands.add_parser("replay", help="replay a fixture or every fixture below a folder")
    replay.add_argument("path")
    replay.add_argument("--engine", required=True, help=engine_help)
    replay.add_argument("--no-fork", action="store_true", help="replay in this process (a debugger)")
    replay.add_argument("--timeout", type=float, default=600.0, help="seconds per fixture (600)")

    shrink = commands.add_parser("shrink", help="shrink a failing fixture")
    shrink.add_argument("path")
    shrink.add_argument("--engine", required=True, help=engine_help)
    shrink.add_argument("--property", default=None, help="default: the fixture's, else prefix")
    shrink.add_argument("--time", type=float, default=60.0, help="time budget in seconds")
    shrink.add_argument("--out", default="kvfuzz-out", help="folder for the shrunk fixture")
    shrink.add_argument("--no-fork", action="store_true", help="judge in this process (a debugger)")
    shrink.add_argument("--timeout", type=float, default=600.0, help="seconds per judgement (600)")

    check = commands.add_parser("check", help="random scenarios, every property")
    check.add_argument("--engine", required=True, help=engine_help)
    check.add_argument("--cases", type=int, default=100)
    check.add_argument("--seed", type=int, default=1)
    check.add_argument("--property", default=None, help="comma-separated (default: all six)")
    check.add_argument("--out", default="kvfuzz-out")
    check.add_argument("--max-tokens", type=int, default=0)
    check.add_argument("--case-seed", type=int, default=None, help="run exactly the case of this seed")
    check.add_argument("--jobs", type=int, default=1, help="worker processes (1)")
    check.add_argument("--no-fork", action="store_true", help="judge in this process (a debugger)")
    check.add_argument("--timeout", type=float, default=600.0, help="seconds per case (600)")
    check.add_argument("--max-failures", type=int, default=None, help="distinct findings before stopping")
    check.add_argument("--ignore", action="append", default=[], help="a signature to set aside")
    check.add_argument(
        "--known",
        action="append",
        default=[],
        help="a fixture (or folder of fixtures) of a known bug: replayed, and set aside when found again",
    )
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        factory = load_factory(args.engine)
        if args.command == "replay":
            result = kvfuzz.replay(args.path, factory, fork=not args.no_fork, timeout=args.timeout)
            print(result.summary())
            return 2 if result.count("bad") else (0 if result.passed else 1)
        if args.command == "shrink":
            shrunk = kvfuzz.shrink(
                args.path,
                factory,
                args.property,
                seconds=args.time,
                out=args.out,
                fork=not args.no_fork,
                timeout=args.timeout,
            )
            if shrunk is None:
                print(f"nothing to shrink: {args.path} passes")
                return 0
            print(f"{shrunk.signature}: saved to {shrunk.fixture}\n{shrunk.report}")
            return 1
        result = kvfuzz.check(
            factory,
            cases=args.cases,
            seed=args.seed,
            properties=args.property,
            out=args.out,
            max_tokens=args.max_tokens,
            case_seed=args.case_seed,
            jobs=args.jobs,
            fork=not args.no_fork,
            timeout=args.timeout,
            max_failures=args.max_failures,
            ignore=args.ignore,
            known=args.known,
        )
        print(result.summary())
        return 0 if result.passed else 1
    except (ValueError, FileNotFoundError, kvfuzz.EngineError) as error:
        print(f"kvfuzz: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
