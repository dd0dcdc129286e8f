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

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status == 2 and message:  # a usage error: the line is kept for --json's object
            self._print_message(message, sys.stderr)
            raise _UsageExit(message.strip())
        super().exit(status, message)


class _UsageExit(SystemExit):
    """A usage error, already said on stderr (exit status 2); ``message`` is that line
    without its ``trainpace VERB: error:`` start."""

    def __init__(self, line: str) -> None:
        super().__init__(2)
        self.message = line.partition(": error: ")[2] or line


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
    as_json = verb is not None and _asks_json(_verb_parser(parser, verb), arguments[1:])
    try:
        if any("\x00" in argument for argument in arguments):  # no path or value holds one
            parser.error("an argument holds a NUL byte (\\x00); no path or value can")
        args, unknown = parser.parse_known_args(arguments)
        if unknown:  # said by the verb (argparse would say it as the top-level command)
            _Parser(prog=f"{parser.prog} {args.verb}").error(
                f"unrecognized arguments: {' '.join(unknown)}")
    except _UsageExit as exc:
        if as_json and verb is not None:  # --json prints one object, also for bad usage
            from trainpace.cli._output import print_error_json

            print_error_json(verb, exc.message, 2)
        raise
    # The library never configures logging; the CLI shows warnings on stderr.
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    from trainpace.report._text import safe_text  # names in errors come from files

    try:
        code: int = args._run(args)
    except TrainpaceError as exc:
        return _own_error(args, safe_text(exc))
    except OSError as exc:  # a path the user gave that cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        return _own_error(args, f"{safe_text(where)}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print(f"trainpace {args.verb}: interrupted", file=sys.stderr)
        return 130
    return code


def _own_error(args: argparse.Namespace, message: str) -> int:
    """Say the tool's own error on stderr (and as the one object of ``--json``); exit 1."""
    print(f"trainpace {args.verb}: error: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        from trainpace.cli._output import print_error_json

        print_error_json(args.verb, message, 1)
    return 1


def _verb_parser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser:
    # argparse has no public way to reach a sub-parser; its action keeps them by name
    sub = next(action for action in parser._actions
               if isinstance(action, argparse._SubParsersAction))
    return sub.choices[verb]  # type: ignore[no-any-return]


def _asks_json(parser: argparse.ArgumentParser, tokens: Sequence[str]) -> bool:
    """Whether ``--json`` is among the verb's own options in ``tokens`` (known before the
    parse, which may fail): not after ``--``, and, for a verb that passes the rest of its
    line on (``run``'s script and its arguments), not after the first positional word."""
    options = parser._option_string_actions  # (argparse keeps its table private)
    passes_rest_on = any(action.nargs == argparse.REMAINDER for action in parser._actions)
    skip_value = maybe_value = False
    for token in tokens:
        if skip_value or (maybe_value and not token.startswith("-")):
            skip_value = maybe_value = False
            continue
        maybe_value = False
        if token == "--":
            return False
        if not token.startswith("-") or token == "-":
            if passes_rest_on:
                return False
            continue
        name = token.partition("=")[0]
        matches = [option for option in options if option.startswith(name)]
        action = options.get(name) or (options[matches[0]] if len(matches) == 1 else None)
        if action is None:
            continue
        if action.dest == "json":
            return True
        if action.nargs == argparse.REMAINDER:
            return False
        takes_value = action.nargs != 0 and "=" not in token
        skip_value = takes_value and action.nargs != "?"
        maybe_value = takes_value and action.nargs == "?"  # taken unless an option follows
    return False


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
