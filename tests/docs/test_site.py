"""The site's generated pages cover what the code has, and the built site reads offline."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from docs.examples import ROOT


def _generate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate",
                                                  ROOT / "docs" / "hooks" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_generate"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


generate = _generate()


def test_every_verb_and_option_is_in_the_cli_reference() -> None:
    import argparse

    from trainpace.cli import VERBS, build_parser

    page = generate.cli_reference()
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(verbs.choices) == set(VERBS)
    for name, verb in verbs.choices.items():
        assert f"## `trainpace {name}`" in page
        for action in verb._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page or f", {option}" in page, (name, option)


def _finding_ids_in_source() -> set[str]:
    ids = set()
    for path in [*(ROOT / "src/trainpace/diagnosis").glob("*.py"),
                 ROOT / "src/trainpace/integrations/blind_spots.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name == "Finding":
                ids |= {kw.value.value for kw in node.keywords if kw.arg == "id"
                        and isinstance(kw.value, ast.Constant)}
            elif name == "verdict" and node.args:
                ids |= {n.value for n in ast.walk(node.args[0]) if isinstance(n, ast.Constant)
                        and isinstance(n.value, str)}
    return ids


def test_the_catalogue_has_every_finding_id_with_its_thresholds() -> None:
    from trainpace.diagnosis import Thresholds

    catalogue = {entry.id: entry for entry in generate.finding_catalogue()}
    in_source = _finding_ids_in_source()
    assert len(in_source) >= 20
    assert in_source <= set(catalogue), sorted(in_source - set(catalogue))
    assert {"data_wait", "slow_phase", "straggler", "checks"} <= set(catalogue)
    data_wait = catalogue["data_wait"]
    assert {"data_wait_warning_pct", "data_wait_critical_pct"} <= data_wait.thresholds
    assert data_wait.evidence and data_wait.advice
    page = generate.findings()
    for entry in catalogue.values():
        assert f"### `{entry.id}`" in page
    every = generate.thresholds()
    for field in dataclasses.fields(Thresholds):
        assert f"| `{field.name}` |" in every


def test_every_meter_keyword_is_listed() -> None:
    from trainpace.config import MeterConfig

    page = generate.meter_options()
    for field in dataclasses.fields(MeterConfig):
        assert f"| `{field.name}` |" in page


def test_every_metric_tag_is_listed() -> None:
    from trainpace.sinks import names

    page = generate.metric_names()
    for tag, _ in [*names.WINDOW_TAGS.values(), *names.SUMMARY_TAGS.values()]:
        assert f"`{tag}`" in page and f"`{names.prometheus_name(tag)}`" in page


def test_every_summary_section_and_key_is_in_the_schema() -> None:
    from trainpace.summary import Summary

    page = generate.summary_schema()
    as_dict = Summary().to_dict()
    for key, value in as_dict.items():
        assert f"| `{key}` |" in page
        if isinstance(value, dict):
            assert f"### `{key}`" in page
            for inner in value:
                assert f"| `{inner}` |" in page, (key, inner)


def test_a_missing_benchmark_result_says_not_measured(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate, "BENCHMARK_RESULTS", tmp_path)
    assert "Not measured yet" in generate.benchmark("overhead")
    (tmp_path / "overhead.json").write_text(
        '{"date": "2026-12-01 10:00 UTC", "command": "python benchmarks/overhead.py --quick",'
        ' "quick": true, "machine": {"cores": 2, "cpu": "AMD EPYC", "load_before": [1.5],'
        ' "load_after": [2.0], "python": "3.11.7", "torch": "2.13.0"},'
        ' "rows": [{"tool": "trainpace", "overhead_us": 8.25}], "figures": {"ratio": 0.5}}')
    page = generate.benchmark("overhead")
    assert "*Measured 2026-12-01 10:00 UTC* on AMD EPYC, 2 cores" in page
    assert "a quick run" in page
    assert "| trainpace | 8.25 |" in page and "| ratio | 0.5 |" in page


def test_every_benchmark_writes_its_result_file() -> None:
    for script in (ROOT / "benchmarks").glob("*.py"):
        text = script.read_text()
        # helpers (results.py, ddp_procs.py) are imported, never run; gpu_check says PASS/FAIL
        if script.name == "gpu_check.py" or 'if __name__ == "__main__"' not in text:
            continue
        assert f'write_result("{script.stem}"' in text, script.name
        assert f"<!-- generate: benchmark {script.stem} -->" in (
            ROOT / "docs" / "performance.md").read_text()


# What a page may not fetch from the network: a script, a style sheet or a font.
_REMOTE = re.compile(
    r"""<script[^>]+src=["']?(?:https?:)?//|<link[^>]+href=["']?(?:https?:)?//"""
    r"""|@import\s+(?:url\()?["']?(?:https?:)?//|url\(["']?(?:https?:)?//"""
    r"""|fonts\.googleapis|fonts\.gstatic""", re.I)


@pytest.mark.slow
def test_the_built_site_fetches_nothing_from_the_network(tmp_path: Path) -> None:
    site = os.environ.get("TRAINPACE_DOCS_SITE")
    if site:
        site_dir = Path(site) if Path(site).is_absolute() else ROOT / site
    else:
        pytest.importorskip("mkdocs")
        pytest.importorskip("material")
        site_dir = tmp_path / "site"
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                        str(site_dir)], cwd=ROOT, check=True, capture_output=True, timeout=600)
    pages = list(site_dir.rglob("*.html"))
    for page in (ROOT / "docs").rglob("*.md"):
        built = site_dir / page.relative_to(ROOT / "docs").with_suffix(".html")
        assert built in pages, f"{page.name} was not built"
    offenders = [f"{path.relative_to(site_dir)}: {match.group(0)}"
                 for path in [*pages, *site_dir.rglob("*.css"), *site_dir.rglob("*.js")]
                 for match in _REMOTE.finditer(path.read_text(errors="replace"))]
    assert not offenders, offenders
    assert (site_dir / "concepts" / "findings.html").read_text().count("<h3") >= 20


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    for link in local:
        assert (ROOT / link).exists(), link


def test_the_readme_keeps_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert ("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && "
            ".venv/bin/pip install -e '.[dev]' && .venv/bin/trainpace demo") in readme
    assert "\n.venv/bin/python -m pytest -q\n" in readme


def test_the_layout_names_every_module_with_its_job():
    package = ROOT / "src" / "trainpace"
    page = generate.package_layout()
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        job = generate._first_paragraph(path)
        assert job, f"{path.relative_to(package)} has no docstring to say its job"
        if path.name == "__init__.py":
            continue
        if path.parent == package:
            assert f"| `{path.name}` | {job.replace('|', chr(92) + '|')} |" in page
        elif path.parent.parent == package:
            row = next(line for line in page.splitlines()
                       if line.startswith(f"| `{path.parent.name}/` |"))
            assert path.stem in row.rsplit("|", 2)[1].strip().split(", ")
