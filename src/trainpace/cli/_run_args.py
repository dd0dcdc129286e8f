"""The flags of ``trainpace run`` (checked by argparse: a bad one is exit 2, on one line), the
script they name, and the Meter keywords they set."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from trainpace.cli._args import number

# Output flags passed through to the Meter keyword of the same name: (flag, add_argument
# settings).
SINK_FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--tensorboard", {"metavar": "DIR", "help": "also write TensorBoard event files to DIR "
                       "(pip install 'trainpace[tensorboard]')"}),
    ("--wandb", {"action": "store_const", "const": True, "help": "also log to W&B (the "
                 "active run, else a new one; pip install 'trainpace[wandb]')"}),
    ("--mlflow", {"nargs": "?", "const": True, "metavar": "URI", "help": "also log to MLflow "
                  "(the active run, or the tracking URI; pip install 'trainpace[mlflow]')"}),
    ("--prometheus", {"type": lambda text: _port(text), "metavar": "PORT",
                      "help": "also serve the window figures to Prometheus on PORT "
                      "(pip install 'trainpace[prometheus]')"}),
    ("--prometheus-host", {"metavar": "HOST",
                           "help": "the exporter's address (default 127.0.0.1)"}),
    # what the run costs (the Meter keywords of the same names)
    ("--price-per-hour", {"type": number(float, what="a price per device-hour"),
                          "metavar": "P", "help": "price of one device-hour: the run's cost, "
                          "per million samples and tokens, and to the target"}),
    ("--grid-g-per-kwh", {"type": number(float), "metavar": "G",
                          "help": "grid carbon intensity (gCO2/kWh) for the CO2 figure"}),
    ("--rated-power-w", {"type": number(float), "metavar": "W",
                         "help": "a device's rated power, for an energy estimate where "
                         "nothing measured it"}),
)


def _keyword(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _int_at_least(text: str, low: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(
            f"must be {'at least 1' if low == 1 else f'{low} or more'}, got {value}")
    return value


def _port(text: str) -> int:
    value = _int_at_least(text, 1, "a TCP port")
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535, got {value}")
    return value


def _positive(text: str) -> int:
    return _int_at_least(text, 1, "a whole number")


def _warmup(text: str) -> int | str:
    return "auto" if text == "auto" else _int_at_least(text, 0, "N or 'auto'")


def _steps_range(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition(":")
    try:
        first, last = int(start), int(stop)
    except ValueError:
        first = last = 0
    if not sep or first < 1 or last <= first:
        raise argparse.ArgumentTypeError(f"expected START:STOP with 1 <= START < STOP, got "
                                         f"{text!r}")
    return first, last


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's flags; everything after the script (or -m MODULE) is the script's."""
    parser.add_argument("--out", metavar="DIR",
                        help="run folder to write (default: runs/<script name>; never "
                             "overwritten)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object on stdout (the script's "
                             "stdout then goes to stderr)")
    parser.add_argument("--html", metavar="FILE", help="also write the HTML report to FILE")
    parser.add_argument("--quiet", action="store_true",
                        help="show nothing until the report (no live panel, no window lines)")
    parser.add_argument("--all-ranks", action="store_true",
                        help="under torchrun, every rank shows its own window lines and report "
                             "(default: rank 0 shows the job's, the others nothing)")
    parser.add_argument("--window", type=_positive, default=100, metavar="N",
                        help="steps per window: the live view's refresh (default: 100)")
    parser.add_argument("--warmup", type=_warmup, default="auto", metavar="N|auto",
                        help="steps left out of the steady figures (default: auto)")
    parser.add_argument("--target-loss", type=number(float), metavar="X",
                        help="time the run to the smoothed loss reaching X (and show an ETA)")
    parser.add_argument("--profile", type=_steps_range, metavar="START:STOP",
                        help="record and analyze a profiler trace of steps START..STOP")
    parser.add_argument("--samples-per-step", type=_positive, metavar="N",
                        help="samples in one optimizer step (for a script without DataLoader)")
    parser.add_argument("--tokens-per-step", type=_positive, metavar="N",
                        help="tokens in one optimizer step (for a script without DataLoader)")
    for flag, settings in SINK_FLAGS:
        parser.add_argument(flag, **settings)
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                        help="run a module as `python -m MODULE` does (the rest: its args)")
    parser.add_argument("script", nargs=argparse.REMAINDER, metavar="-- SCRIPT ...",
                        help="the script and its arguments (an interpreter before it, as in "
                             "-- python train.py, is taken as python would)")
    _one_line_errors(parser)


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage errors of this verb on one line (the usage is long; --help shows it)."""
    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")

    parse_known = parser.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = parse_known(args, namespace)
        if extras:  # an unknown option before the script: ours, not the script's
            error(f"unrecognized option {' '.join(extras)}; the script's own options go "
                  "after the script")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def script_of(args: argparse.Namespace) -> Any:
    """The script (or module) the arguments name: SCRIPT, -m MODULE, or either after python;
    :class:`~trainpace.errors.TargetError` when there is none or it cannot be run."""
    from trainpace.integrations._script import check_target, target_of

    if args.module is not None:
        found = target_of(["-m", *args.module])
    else:
        rest = list(args.script)
        if rest and rest[0] == "--":
            rest = rest[1:]
        found = target_of(rest)
    check_target(found)
    _check_html(args.html)
    return found


def run_folder(args: argparse.Namespace, target: Any) -> Path:
    """``--out``, else ``runs/<the script's name>``."""
    if args.out:
        return Path(args.out)
    return Path("runs") / (Path(target.name).stem if target.path is not None else target.name)


def meter_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Meter keywords the flags set (the others are ``run``'s own)."""
    settings: dict[str, Any] = {"window": args.window, "warmup": args.warmup,
                                "target_loss": args.target_loss, "profile_steps": args.profile}
    for flag, _ in SINK_FLAGS:
        value = getattr(args, _keyword(flag))
        if value is not None:
            settings[_keyword(flag)] = value
    return settings


def _check_html(html: str | None) -> None:
    """A ``--html`` path that cannot be written is refused before the script starts."""
    from trainpace.errors import TargetError

    if html is None:
        return
    path = Path(html)
    existed = path.exists()
    try:  # a real attempt: permissions, a read-only mount, a path under a file
        with open(path, "a"):
            pass
    except OSError as exc:
        raise TargetError(f"--html {html}: cannot be written ({exc.strerror or exc}); give "
                          "a file path that can be written", usage=True) from None
    if not existed:
        path.unlink()


