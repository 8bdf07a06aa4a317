"""The ``evalstop`` command. Each subcommand lives in a module with ``add_arguments(parser)``
(which sets ``run``); heavy dependencies are imported inside ``run``, never here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: (subcommand, module, one-line help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("reproduce", "evalstop.experiments.reproduce", "the paper's headline, or every study (--all)"),
    ("simulate", "evalstop.experiments.simulate_cmd", "run one configuration from a TOML file"),
    ("replay", "evalstop.replay", "replay recorded eval curves through a detector"),
    ("bank", "evalstop.workloads.bank", "write a bank of eval curves from miniature RL runs"),
    ("validate", "evalstop.experiments.validate", "score stopping rules on the bank and real curves"),
    ("report", "evalstop.experiments.report", "write the Markdown/HTML/PNG report of a results directory"),
    ("serve", "evalstop.service.cli", "run the EvalStop service"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalstop", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module, help_text in COMMANDS:
        importlib.import_module(module).add_arguments(sub.add_parser(name, help=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
