"""The ``evalstop`` command.

Each subcommand lives in a module with ``add_arguments(parser)`` (which sets ``run``); heavy
dependencies are imported inside ``run``, never here. A missing optional dependency prints one
line naming the extra to install; Ctrl-C prints one line (with how to resume, where a run can).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from . import __version__
from ._extras import extra_for, missing_message

DESCRIPTION = (
    "Stop reward-hacked fine-tuning jobs early, free their GPUs and keep their best checkpoint. "
    "Reproduce the EvalStop paper's results, replay your own eval curves through a stopping rule, "
    "or run the control-plane service."
)
EPILOG = """examples:
  evalstop reproduce --quick            the headline result in a few seconds
  evalstop reproduce --all              every study of the paper, with an HTML report
  evalstop replay curves.csv            which of your runs a stopping rule would stop
  evalstop simulate --example           a configuration file to start from

Run 'evalstop COMMAND --help' for a command's options."""

#: (subcommand, module, one-line help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("reproduce", "evalstop.experiments.reproduce", "the paper's headline, or every study (--all)"),
    ("simulate", "evalstop.experiments.simulate_cmd", "run one configuration from a TOML file"),
    ("replay", "evalstop.replay", "replay recorded eval curves through a stopping rule"),
    ("bank", "evalstop.workloads.bank", "write a bank of eval curves from miniature RL runs"),
    ("validate", "evalstop.experiments.validate", "score stopping rules on the bank and real curves"),
    ("rewind", "evalstop.experiments.rewind_cmd", "rewind instead of stop, measured on real TRL GRPO runs"),
    ("report", "evalstop.experiments.report", "write the Markdown/HTML/PNG report of a results directory"),
    ("watch", "evalstop.sidecar.cli", "watch a run's log, stop it if it hacks, keep its best checkpoint"),
    ("serve", "evalstop.service.cli", "run the EvalStop service (needs the 'service' extra)"),
    ("testbed", "evalstop.testbed.cli", "real Ray or Slurm jobs + a real service, shadow vs enforced"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalstop", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"evalstop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        importlib.import_module(module).add_arguments(
            sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and extra_for(exc.name) is not None:
            print(missing_message(exc.name or "", f"evalstop {args.command}"), file=sys.stderr)
        elif "pip install -e '" in str(exc):  # already says which extra to install
            print(f"evalstop {args.command}: {exc}", file=sys.stderr)
        else:
            raise
        return 2
    except KeyboardInterrupt:
        print(f"evalstop {args.command}: interrupted. {_resume_hint(args)}".rstrip(), file=sys.stderr)
        return 130


def _resume_hint(args: argparse.Namespace) -> str:
    if args.command == "reproduce" and (getattr(args, "all", False) or getattr(args, "study", None)):
        if getattr(args, "no_cache", False):
            return "Nothing was cached (--no-cache); run it again without --no-cache to make it resumable."
        cache = args.cache or args.out / "cache"
        return (f"Finished tasks are cached in {cache}: run the same command again to resume "
                "from where it stopped.")
    return ""


if __name__ == "__main__":
    sys.exit(main())
