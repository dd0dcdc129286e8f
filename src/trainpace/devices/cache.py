"""The measured ceilings of one device, and their cache: one file per device identity.

The cache lives under ``$TRAINPACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainpace``, else
``~/.cache/trainpace``; a CPU's identity includes torch's thread count. Storing guards the
cache (:func:`store_ceilings`): a measurement taken while other processes held the CPU is
*provisional* (kept, labelled, never used as the machine's peak), a quiet one always replaces a
provisional one and a full one a quick one, and a figure far below the cached one of the same
standing, or outside the spec sheet's bounds, is rejected with a warning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainpace.devices.specs import Peak, Peaks, table_peaks

SCHEMA = "trainpace.ceilings/1"


@dataclass(frozen=True, kw_only=True)
class Ceilings:
    """One device's measured ceilings (GB/s and TFLOP/s per dtype)."""

    kind: str
    name: str
    threads: int | None = None  # CPU: torch's intra-op threads during the measurement
    bandwidth_gb_s: float | None = None
    matmul_tflops: Mapping[str, float] = field(default_factory=dict)
    measured_at: str | None = None
    torch_version: str | None = None
    method: Mapping[str, Any] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)  # dtype -> why not measured

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``trainpace ceilings --json`` and of the cache file."""
        return {
            "schema": SCHEMA,
            "device": {"kind": self.kind, "name": self.name, "threads": self.threads},
            "bandwidth_gb_s": self.bandwidth_gb_s,
            "matmul_tflops": dict(self.matmul_tflops),
            "skipped": dict(self.skipped),
            "measured_at": self.measured_at,
            "torch": self.torch_version,
            "method": dict(self.method),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ceilings:
        """Read :meth:`to_dict` output back; ValueError if it is not one."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        device = data["device"]
        return cls(
            kind=str(device["kind"]),
            name=str(device["name"]),
            threads=device.get("threads"),
            bandwidth_gb_s=data.get("bandwidth_gb_s"),
            matmul_tflops={str(k): float(v) for k, v in data.get("matmul_tflops", {}).items()},
            measured_at=data.get("measured_at"),
            torch_version=data.get("torch"),
            method=data.get("method") or {},
            skipped=data.get("skipped") or {},
        )

    @property
    def quick(self) -> bool:
        """Measured with small sizes and short budgets (``--quick``, or the Meter's first run)."""
        return bool(self.method.get("quick"))

    @property
    def quiet(self) -> bool:
        """Measured while other processes left the machine alone (see
        :data:`QUIET_OTHERS_CORES`), and no run has since gone faster than these figures.
        A cache written before trainpace checked the load says nothing: not quiet."""
        return self.method.get("quiet") is True and not self.method.get("exceeded")

    @property
    def why_provisional(self) -> str | None:
        """Why these figures are not the machine's peak (None when they are)."""
        reasons = []
        others = self.method.get("others_cpu_cores")
        if self.method.get("quiet") is not True:
            reasons.append(
                f"measured while other processes took {others:.2f} CPU cores (quiet is under "
                f"{QUIET_OTHERS_CORES})" if isinstance(others, (int, float))
                else "measured without a check of what other processes took")
        if self.method.get("exceeded"):
            reasons.append(str(self.method["exceeded"]))
        return "; ".join(reasons) or None

    @property
    def standing(self) -> tuple[bool, bool]:
        """(quiet, full): a measurement of higher standing replaces one of lower."""
        return self.quiet, not self.quick

    def peaks(self) -> Peaks:
        """These ceilings as :class:`Peaks`, each naming where it came from; none at all when
        they are provisional (:attr:`quiet` is false): a loaded machine's figure is not the
        machine's peak, and a verdict drawn from it changes from run to run."""
        if not self.quiet:
            return Peaks()
        day = (self.measured_at or "")[:10] or "at an unknown date"
        where = f"{self.name}" + (f", {self.threads} threads" if self.threads else "")
        how = "quick, " if self.quick else ""
        source = f"ceilings: measured {day} on {where} ({how}trainpace ceilings)"
        return Peaks(
            bandwidth_gb_s=Peak(self.bandwidth_gb_s, source) if self.bandwidth_gb_s else None,
            tflops={k: Peak(v, source) for k, v in self.matmul_tflops.items() if v > 0},
        )


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where ceilings are cached (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("TRAINPACE_CACHE_DIR"):
        return Path(env["TRAINPACE_CACHE_DIR"])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "trainpace"
    return Path.home() / ".cache" / "trainpace"


def cache_path(kind: str, name: str, threads: int | None,
               env: Mapping[str, str] | None = None) -> Path:
    """The cache file of one device identity."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"
    suffix = f"-{threads}t" if threads else ""
    return cache_dir(env) / "ceilings" / f"{kind}-{slug}{suffix}.json"


def load_cached(kind: str, name: str, threads: int | None,
                env: Mapping[str, str] | None = None) -> Ceilings | None:
    """The cached ceilings of one device identity, or None (none, unreadable, another's)."""
    path = cache_path(kind, name, threads, env)
    try:
        ceilings = Ceilings.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if (ceilings.kind, ceilings.name, ceilings.threads) != (kind, name, threads):
        return None
    return ceilings


def save_ceilings(ceilings: Ceilings, env: Mapping[str, str] | None = None) -> Path:
    """Write ``ceilings`` to its cache file (atomically) and return the path."""
    path = cache_path(ceilings.kind, ceilings.name, ceilings.threads, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(ceilings.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


# Other processes' average CPU use (cores) while a ceiling was measured, under which the
# measurement is quiet: a quarter of a core takes at most a quarter of one measuring thread's
# time, against the 13× (matmul) and 4× (bandwidth) that busy machines gave (issue 25 §3).
QUIET_OTHERS_CORES = 0.25

# A measured figure this far below the cached one of the same standing, or outside these bounds
# of the spec sheet, is a broken measurement (a loaded machine, a throttled card), not the
# machine's ceiling. A higher one is taken: a load only ever lowers a ceiling.
WILD_VS_CACHED = 4.0
ABOVE_SPEC = 1.1  # nothing sustains more than its sheet
BELOW_SPEC = 0.1


@dataclass(frozen=True)
class Stored:
    """What :func:`store_ceilings` kept, and why."""

    ceilings: Ceilings  # what the cache holds now (the new figures, the old, or a merge)
    path: Path
    saved: bool
    warnings: tuple[str, ...] = ()
    rejected: Mapping[str, str] = field(default_factory=dict)  # figure -> why


def _figures(c: Ceilings) -> dict[str, float]:
    out = {f"matmul {k}": v for k, v in c.matmul_tflops.items()}
    if c.bandwidth_gb_s:
        out["bandwidth"] = c.bandwidth_gb_s
    return out


def _spec_figures(name: str) -> dict[str, float]:
    peaks = table_peaks(name)
    out = {f"matmul {k}": p.value for k, p in peaks.tflops.items()}
    if peaks.bandwidth_gb_s is not None:
        out["bandwidth"] = peaks.bandwidth_gb_s.value
    return out


def _unit(key: str) -> str:
    return "GB/s" if key == "bandwidth" else "TFLOP/s"


def store_ceilings(new: Ceilings, env: Mapping[str, str] | None = None) -> Stored:
    """Cache ``new`` unless it would make the cache worse; say what was kept and why.

    Standing (:attr:`Ceilings.standing`) decides first: a quiet measurement beats a
    provisional one, then a full one beats a quick one.

    - a measurement of lower standing than the cached one never replaces it;
    - one of higher standing replaces it whole (the cached figures do not judge it);
    - at equal standing, a figure more than :data:`WILD_VS_CACHED` × below the cached one is
      rejected (the cached figure stays), a higher one is taken;
    - any figure outside [:data:`BELOW_SPEC`, :data:`ABOVE_SPEC`] × the spec sheet is
      rejected (the cached figure stays, or none, with nothing cached);
    - dtypes not measured now keep their cached figures.
    """
    path = cache_path(new.kind, new.name, new.threads, env)
    cached = load_cached(new.kind, new.name, new.threads, env)
    if cached is not None and new.standing < cached.standing:
        return Stored(cached, path, False, (
            f"a {_describe(new)} measurement does not replace the {_describe(cached)} one "
            f"cached at {path} (measured {cached.measured_at}); run `trainpace ceilings` "
            "without --quick on a quiet machine to measure again",))
    if cached is not None and new.standing > cached.standing:
        cached = None  # outranked: its figures neither judge nor fill in the new ones
    spec, before = _spec_figures(new.name), _figures(cached) if cached is not None else {}
    rejected: dict[str, str] = {}
    for key, value in _figures(new).items():
        unit, sheet, old = _unit(key), spec.get(key), before.get(key)
        if sheet is not None and not BELOW_SPEC * sheet <= value <= ABOVE_SPEC * sheet:
            rejected[key] = (f"{value:.4g} {unit} is {value / sheet:.2g}× the spec sheet's "
                             f"{sheet:.4g} {unit}")
        elif old is not None and value < old / WILD_VS_CACHED:
            rejected[key] = (f"{value:.4g} {unit} is {value / old:.2g}× the cached "
                             f"{old:.4g} {unit}")
    keep_bw = "bandwidth" in rejected or new.bandwidth_gb_s is None
    tflops = dict(cached.matmul_tflops) if cached is not None else {}
    tflops.update({k: v for k, v in new.matmul_tflops.items() if f"matmul {k}" not in rejected})
    merged = dataclasses.replace(
        new,
        bandwidth_gb_s=(cached.bandwidth_gb_s if cached is not None else None) if keep_bw
        else new.bandwidth_gb_s,
        matmul_tflops=tflops,
    )
    warnings = tuple(
        f"measured {key} rejected: {why}; a loaded machine or a throttled device gives such "
        f"figures — " + (f"the cached figure stays (delete {path} to measure afresh)"
                         if key in before else "nothing is kept for it")
        for key, why in rejected.items())
    if not _figures(merged):
        return Stored(merged, path, False, warnings, rejected)
    return Stored(merged, save_ceilings(merged, env), True, warnings, rejected)


def _describe(c: Ceilings) -> str:
    return ("quick" if c.quick else "full") + ("" if c.quiet else " provisional")


def with_exceeded(ceilings: Ceilings, achieved: Mapping[str, float]) -> Ceilings | None:
    """``ceilings`` marked provisional when a run achieved more than one of its figures
    (``achieved``: ``{"bandwidth": GB/s, "matmul float32": TFLOP/s, ...}``); None when none
    was exceeded. MFU over 100% is not a measurement: the peak is wrong, and is measured
    again."""
    figures = _figures(ceilings)
    over = [f"a run achieved {value:.4g} {_unit(key)} {key}, above the ceiling's "
            f"{figures[key]:.4g}" for key, value in achieved.items()
            if key in figures and value > figures[key]]
    if not over:
        return None
    return dataclasses.replace(ceilings, method={**ceilings.method, "exceeded": "; ".join(over)})
