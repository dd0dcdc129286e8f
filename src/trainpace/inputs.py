"""Files read back (run folders, traces) opened so that no input can hang or exhaust a reader.

A run folder or a trace may come from anywhere: a copy, a shared folder another user can
write, a hand-made file. A FIFO would block the open (or the read) forever, ``/dev/zero`` and
``/dev/urandom`` never end, and a symlink can point at either. So an input is opened without
blocking (``O_NONBLOCK``: a FIFO opens at once, writer or not), its type is checked on the
open descriptor (``fstat``: no window between a check and the open), and anything but a
regular file is refused by name. A whole-file read (JSON) is also bounded in size, checked
before reading and again while reading (the file may grow).
"""

from __future__ import annotations

import os
import stat
from typing import IO

from trainpace.errors import TrainpaceError

JSON_MAX_BYTES = 8 << 20  # meta.json, summary.json: a few kB written; 8 MB is generous


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], error: type[TrainpaceError],
                 allow_streams: bool = False) -> IO[bytes]:
    """``path`` opened for binary reading; ``error`` naming it when it cannot be read or is
    not a regular file (with ``allow_streams``, a FIFO is accepted: ``analyze`` can read a
    trace piped into one, read once, as it comes)."""
    name = os.fspath(path)
    try:
        if allow_streams and stat.S_ISFIFO(os.stat(name).st_mode):
            # a stream asked for: opened as one, waiting for its writer (a FIFO opened
            # without blocking would read as empty until a writer comes)
            return open(name, "rb")
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{name}: cannot read it ({exc.strerror or exc})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode) and not (allow_streams and stat.S_ISFIFO(mode)):
            raise error(f"{name}: {_kind(mode)}, not a regular file; trainpace reads only "
                        "the files it wrote (replace it with the file itself)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | os.PathLike[str], max_bytes: int,
                 error: type[TrainpaceError]) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them (more is an
    ``error`` naming the file and the limit)."""
    name = os.fspath(path)
    with open_regular(name, error) as stream:
        size = os.fstat(stream.fileno()).st_size
        data = b"" if size > max_bytes else stream.read(max_bytes + 1)
    if size > max_bytes or len(data) > max_bytes:
        raise error(f"{name}: {max(size, len(data)):,} bytes, more than the {max_bytes:,} "
                    "such a file can hold; it was not written by trainpace")
    return data
