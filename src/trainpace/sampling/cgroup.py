"""The memory limit of this process's cgroup (containers), and its working set.

When a limit is lower than the machine's memory, the host's total is the limit and
``available_gb`` is the limit minus the cgroup's working set (its usage less reclaimable file
cache), if that is lower than what the machine says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainpace.sampling.procfs import ProcFiles, read_bytes, stat_value

STAT_BYTES = 65536  # memory.stat is a few KB; its inactive-file line may sit past the first 4


@dataclass(frozen=True)
class CgroupMemory:
    """The memory limit of this process's cgroup and the files that give its usage."""

    limit_bytes: int
    usage_file: Path
    stat_file: Path
    inactive_key: str  # the reclaimable page-cache line of memory.stat

    def working_set_bytes(self, files: ProcFiles | None = None) -> int | None:
        """Usage less inactive file cache (what the kernel cannot simply drop), or None.

        ``files`` keeps the two files open between calls (the host reading does).
        """
        read = files.read if files is not None else read_bytes
        usage_data = read(str(self.usage_file), 64)
        stat = read(str(self.stat_file), STAT_BYTES)
        if not usage_data or stat is None:
            return None
        try:
            usage = int(usage_data)
        except ValueError:
            return None
        inactive = stat_value(stat, self.inactive_key.encode()) or 0
        return max(usage - inactive, 0)


def find_cgroup_memory(root: str | Path = "/sys/fs/cgroup",
                       proc_cgroup: str | Path = "/proc/self/cgroup") -> CgroupMemory | None:
    """This process's cgroup memory limit (v2, else v1), or None when there is none."""
    root = Path(root)
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        relative = path.lstrip("/")
        if controllers == "" and (root / relative / "memory.max").exists():  # v2
            folder = root / relative
            candidate = (folder / "memory.max", folder / "memory.current", folder / "memory.stat",
                         "inactive_file")
        elif "memory" in controllers.split(","):  # v1
            folder = root / "memory" / relative
            candidate = (folder / "memory.limit_in_bytes", folder / "memory.usage_in_bytes",
                         folder / "memory.stat", "total_inactive_file")
        else:
            continue
        try:
            text = candidate[0].read_text().strip()
        except OSError:
            continue
        if text == "max" or not text.isdigit():
            return None
        return CgroupMemory(int(text), candidate[1], candidate[2], candidate[3])
    return None
