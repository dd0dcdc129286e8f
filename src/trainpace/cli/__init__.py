"""The ``trainpace`` command: parse, call one library function, render, return an exit code.

Each verb lives in its own module ``trainpace.cli._<verb>`` with ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; they import their heavy dependencies
inside ``run`` so that ``trainpace --help`` stays fast. Exit codes: 0 ok, 1 the tool's own
error (one line on stderr, no traceback), 2 bad usage (argparse).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from trainpace._version import __version__
from trainpace.errors import TrainpaceError

# Verb name -> module. Order is the order of `trainpace --help`.
VERBS: dict[str, str] = {
    "demo": "trainpace.cli._demo",
    "run": "trainpace.cli._run",
    "report": "trainpace.cli._report",
    "compare": "trainpace.cli._compare",
    "analyze": "trainpace.cli._analyze",
    "ceilings": "trainpace.cli._ceilings",
    "tune-loader": "trainpace.cli._tune",
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a one-line usage error: what is wrong, and where the help is
    (argparse's own prints the whole usage first: 3-5 lines before the point)."""

    def error(self, message: str) -> NoReturn:
        from trainpace.report._text import safe_text  # the arguments, quoted, are anyone's

        self.exit(2, f"{self.prog}: error: {safe_text(message)} (see `{self.prog} --help`)\n")


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, one sub-parser per verb; only ``verb``'s when it is given (the
    other verbs' modules and arguments then cost nothing: the floor of a quick command)."""
    parser = _Parser(
        prog="trainpace",
        description="Measure and explain the speed of PyTorch training.",
    )
    parser.add_argument("--version", action="version", version=f"trainpace {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, module_name in VERBS.items():
        if verb is not None and name != verb:
            continue
        module = importlib.import_module(module_name)
        verb_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(verb_parser)
        verb_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainpace`` command; returns the exit code."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    # A command line that starts with a verb is parsed by that verb's parser alone, with the
    # same result; anything else (--help, --version, a typo) gets the full parser.
    verb = arguments[0] if arguments and arguments[0] in VERBS else None
    parser = build_parser(verb)
    if any("\x00" in argument for argument in arguments):  # no path or value holds one
        parser.error("an argument holds a NUL byte (\\x00); no path or value can")
    args, unknown = parser.parse_known_args(arguments)
    if unknown:  # said by the verb (argparse would say it as the top-level command)
        _Parser(prog=f"{parser.prog} {args.verb}").error(
            f"unrecognized arguments: {' '.join(unknown)}")
    # The library never configures logging; the CLI shows warnings on stderr.
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    from trainpace.report._text import safe_text  # names in errors come from files

    try:
        code: int = args._run(args)
    except TrainpaceError as exc:
        print(f"trainpace {args.verb}: error: {safe_text(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:  # a path the user gave that cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"trainpace {args.verb}: error: {safe_text(where)}{exc.strerror or exc}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"trainpace {args.verb}: interrupted", file=sys.stderr)
        return 130
    return code


def entry() -> None:
    """The ``trainpace`` console script: :func:`main`, then the exit."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (a closed pipe): what was left is lost
        # the interpreter's own flush at exit would fail again, with a message on stderr
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = code or 1
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
