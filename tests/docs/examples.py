"""The code blocks of the README and the site, as the tests see them.

A fenced ```python or ```bash block is an example; the HTML comments on the lines right above
its fence say how it is tested:

- ``<!-- test-context: NAME ... -->``: run it with the stand-ins of :mod:`contexts`;
- ``<!-- slow -->``: it takes more than a few seconds (the ``slow`` marker);
- ``<!-- test-file: NAME -->``: the block is a file, not a program: it is written as NAME in the
  folder of the next example of the page, which uses it (a script for ``torchrun``);
- ``<!-- not-run -->``: not run, and only with a visible note right above the comment, a
  quote that starts ``Not run in the tests:`` and says why (a GPU, a cluster).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN_NOTE = "> Not run in the tests:"
FENCE = re.compile(r"^```(\w*)\s*$")
COMMENT = re.compile(r"^<!--\s*([a-z-]+)(?::\s*(.*?))?\s*-->$")


@dataclasses.dataclass(frozen=True)
class Example:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    contexts: tuple[str, ...] = ()
    slow: bool = False
    not_run: str | None = None  # the visible note's reason
    problem: str | None = None  # a marker used wrongly
    files: tuple[tuple[str, str], ...] = ()  # (name, text) written before it runs
    save_as: str | None = None  # this block is a file for the next example

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples(path: Path) -> list[Example]:
    lines = path.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        language = match.group(1)
        if language in ("python", "bash"):
            found.append(_example(path, lines, i, language, "\n".join(lines[i + 1:end])))
        i = end + 1
    examples_: list[Example] = []
    pending: list[tuple[str, str]] = []
    for example in found:
        if example.save_as:
            pending.append((example.save_as, example.code))
            continue
        examples_.append(dataclasses.replace(example, files=tuple(pending)))
        pending = []
    if pending:
        last = found[-1]
        examples_.append(dataclasses.replace(
            last, save_as=None, problem="<!-- test-file --> with no example after it to use it"))
    return examples_


def _example(path: Path, lines: list[str], fence: int, language: str, code: str) -> Example:
    contexts: list[str] = []
    slow = False
    not_run = False
    save_as = None
    above = fence - 1
    while above >= 0 and (match := COMMENT.match(lines[above].strip())):
        kind, value = match.group(1), match.group(2) or ""
        if kind == "test-context":
            contexts += value.split()
        elif kind == "slow":
            slow = True
        elif kind == "not-run":
            not_run = True
        elif kind == "test-file":
            save_as = value.strip()
        above -= 1
    note: list[str] = []
    while above >= 0 and lines[above].startswith(">"):
        note.insert(0, lines[above].lstrip("> ").strip())
        above -= 1
    text = " ".join(note)
    problem = None
    reason = None
    if not_run:
        if not text.startswith(NOT_RUN_NOTE[2:]):
            problem = f"<!-- not-run --> without a visible note starting {NOT_RUN_NOTE!r}"
        else:
            reason = text[len(NOT_RUN_NOTE) - 2:].strip()
            if not reason:
                problem = "the note says no reason"
    return Example(path, fence + 1, language, code, tuple(contexts), slow, reason, problem,
                   save_as=save_as)


def all_examples() -> list[Example]:
    return [e for doc in documents() for e in examples(doc)]
