"""RAPL energy counters of the CPU packages and their DRAM, read from Linux's powercap sysfs.

Each top-level zone ``intel-rapl:N`` is one CPU package; its subzone named ``dram`` counts the
memory attached to it (not included in the package's count; the ``core`` and ``uncore``
subzones are, so they are skipped). A counter is ``energy_uj`` (µJ) and wraps at
``max_energy_range_uj``. AMD's kernels expose their counters under the same interface.

Reading needs root on kernels after 5.10 (the counters were a side channel): where the files
are missing or unreadable the reader is simply unavailable, said once, never an exception.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class RaplZone:
    """One counter: where it is, what it counts, where it wraps."""

    name: str  # "package-0", "dram" (prefixed with its package: "package-0/dram")
    path: Path
    max_energy_range_uj: int


def find_zones(root: Path = POWERCAP) -> list[RaplZone]:
    """The package and DRAM zones under ``root`` that can be read; [] where there are none."""
    zones: list[RaplZone] = []
    if not root.is_dir():
        return zones
    for package in sorted(root.glob("intel-rapl:*")):
        if package.name.count(":") != 1:
            continue  # a subzone; found below through its package
        found = _zone(package, None)
        if found is None:
            continue
        zones.append(found)
        for sub in sorted(package.glob(f"{package.name}:*")):
            zone = _zone(sub, found.name)
            if zone is not None and zone.name.endswith("/dram"):
                zones.append(zone)
    return zones


def _zone(path: Path, parent: str | None) -> RaplZone | None:
    try:
        name = (path / "name").read_text().strip()
        max_uj = int((path / "max_energy_range_uj").read_text())
        int((path / "energy_uj").read_text())  # readable now: readable later
    except (OSError, ValueError):
        return None
    return RaplZone(name if parent is None else f"{parent}/{name}", path, max_uj)


class RaplReader:
    """Reads every RAPL zone once per call: ``{zone: [energy_uj, max_energy_range_uj]}``."""

    def __init__(self, root: Path = POWERCAP) -> None:
        self.zones = find_zones(root)
        self._failed: set[str] = set()

    @property
    def available(self) -> bool:
        """True when at least one counter could be read when the reader was made."""
        return bool(self.zones)

    def read(self) -> dict[str, list[int]]:
        """The counters now; a zone that stops answering is left out (said once)."""
        values: dict[str, list[int]] = {}
        for zone in self.zones:
            try:
                values[zone.name] = [int((zone.path / "energy_uj").read_text()),
                                     zone.max_energy_range_uj]
            except (OSError, ValueError) as exc:
                if zone.name not in self._failed:
                    self._failed.add(zone.name)
                    logger.info("trainpace: RAPL %s cannot be read (%s); its energy is unknown",
                                zone.name, exc)
        return values
