"""Every Python and shell example of the README and the site runs, or says why it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docs import contexts
from docs.examples import ROOT, Example, all_examples

EXAMPLES = all_examples()
TIMEOUT_S = 600  # a slow example on a crowded 2-core machine


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env["TRAINPACE_REPO"] = str(ROOT)
    env["TRAINPACE_CACHE_DIR"] = "cache"  # ceilings measured by an example stay in its folder
    env["WANDB_MODE"] = "offline"  # a W&B example logs to its folder, never to a server
    env["WANDB_SILENT"] = "true"
    env.pop("MLFLOW_TRACKING_URI", None)  # MLflow's default, as on a fresh machine: ./mlflow.db
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(args: list[str], folder: Path, what: str) -> None:
    done = subprocess.run(args, cwd=folder, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, (
        f"{what} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}")


def _params() -> list[object]:
    params = []
    for example in EXAMPLES:
        marks = [pytest.mark.slow] if example.slow else []
        if example.not_run:
            marks.append(pytest.mark.skip(reason=f"not run: {example.not_run}"))
        params.append(pytest.param(example, id=example.name, marks=marks))
    return params


def test_examples_are_found() -> None:
    assert len(EXAMPLES) >= 20
    assert any(e.path.name == "README.md" for e in EXAMPLES)


@pytest.mark.parametrize("example", [pytest.param(e, id=e.name) for e in EXAMPLES])
def test_markers_are_used_right(example: Example) -> None:
    assert example.problem is None, example.problem
    unknown = set(example.contexts) - set(contexts.PRELUDES) - set(contexts.SETUPS)
    assert not unknown, f"unknown test-context {sorted(unknown)}"


@pytest.mark.parametrize("example", _params())
def test_example_runs(example: Example, tmp_path: Path) -> None:
    for name, text in example.files:
        (tmp_path / name).write_text(text + "\n")
    for name in example.contexts:
        if name in contexts.SETUPS:
            (tmp_path / f"setup_{name}.py").write_text(contexts.SETUPS[name])
            _run([sys.executable, f"setup_{name}.py"], tmp_path, f"context {name}")
    if example.language == "python":
        preludes = [contexts.PRELUDES[n] for n in example.contexts if n in contexts.PRELUDES]
        (tmp_path / "example.py").write_text("\n".join([*preludes, example.code]) + "\n")
        _run([sys.executable, "example.py"], tmp_path, example.name)
    else:
        (tmp_path / "example.sh").write_text("set -euo pipefail\n" + example.code + "\n")
        _run(["bash", "example.sh"], tmp_path, example.name)
