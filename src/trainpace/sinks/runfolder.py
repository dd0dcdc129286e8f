"""The run-folder writer: meta.json, steps.jsonl, system.jsonl, summary.json.

Lines are appended and flushed at each window, and summary.json is replaced atomically, so a
run killed with SIGKILL leaves a folder that reads back, losing at most the last window.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import IO, Any

import orjson

from trainpace.runlog import (
    META_FILE,
    PROFILE_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
    SYSTEM_FILE,
    Record,
)

logger = logging.getLogger(__name__)


def fresh_run_folder(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... if it already holds a run (never overwrite one)."""
    candidate, n = path, 1
    while (candidate / META_FILE).exists() or (candidate / SUMMARY_FILE).exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    if candidate != path:
        logger.warning("trainpace: %s already holds a run; writing this one to %s", path, candidate)
    return candidate


class RunFolderSink:
    """Writes one run folder (see :mod:`trainpace.runlog` for the format)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[bytes]] = {}

    def log(self, record: Record) -> None:
        """Write the record where it belongs in the folder."""
        if record.kind == "meta":
            self._replace(META_FILE, record.data)
        elif record.kind == "summary":
            self._replace(SUMMARY_FILE, record.data)
        elif record.kind == "window":
            self._append(STEPS_FILE, record.data["steps"])
        elif record.kind == "system":
            self._append(SYSTEM_FILE, record.data["rows"])
        elif record.kind == "profile":
            self._replace(PROFILE_FILE, record.data)

    def close(self) -> None:
        """Close the appended files."""
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def _append(self, name: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        handle = self._files.get(name)
        if handle is None:
            handle = self._files[name] = open(self.path / name, "ab")  # noqa: SIM115 - kept open
        # orjson writes NaN and infinities as null: strict JSON without a pass over the rows
        handle.write(b"\n".join(map(orjson.dumps, rows)) + b"\n")
        handle.flush()  # in the OS's hands now: survives the process being killed

    def _replace(self, name: str, data: Any) -> None:
        target = self.path / name
        temporary = target.with_suffix(target.suffix + ".tmp")
        temporary.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
        os.replace(temporary, target)  # atomic: a reader sees the old file or the new one
