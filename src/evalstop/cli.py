"""The ``evalstop`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalstop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from . import replay
    from .experiments import reproduce, simulate_cmd

    reproduce.add_arguments(sub.add_parser("reproduce", help="run the paper's headline experiment"))
    simulate_cmd.add_arguments(sub.add_parser("simulate", help="run one configuration from a TOML file"))
    replay.add_arguments(sub.add_parser("replay", help="replay recorded eval curves through a detector"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
