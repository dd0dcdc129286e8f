"""The real-scripts benchmark's environment for its scripts' processes
(``benchmarks/real_scripts.py``): glibc's heap kept between steps, bare or watched alike."""

from __future__ import annotations

from typing import Any

from tests.benchmarks.loading import benchmark_module

real_scripts: Any = benchmark_module("real_scripts")


def test_every_script_process_keeps_glibcs_heap_between_steps() -> None:
    # bare and watched processes alike: the same environment for each kind of run
    assert real_scripts.KEPT_HEAP_ENV == {"MALLOC_TRIM_THRESHOLD_": "1073741824",
                                          "MALLOC_MMAP_THRESHOLD_": "1073741824"}
    assert real_scripts.KEPT_HEAP_ENV.items() <= real_scripts.CHILD_ENV.items()
    assert real_scripts.heap_text(real_scripts.CHILD_ENV) == (
        "kept between steps (MALLOC_TRIM_THRESHOLD_=1073741824, "
        "MALLOC_MMAP_THRESHOLD_=1073741824)")
    assert real_scripts.heap_text({"PATH": "/bin"}) == "glibc's default (its free top trimmed)"
