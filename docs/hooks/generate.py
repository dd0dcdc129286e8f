"""The site's generated pages: made from the code at build time, so they cannot drift.

A page asks for a generated block with an HTML comment on a line of its own::

    <!-- generate: cli -->

and :func:`on_page_markdown` (an mkdocs hook, named under ``hooks:`` in mkdocs.yml) replaces
it with the block's Markdown. Each block is a plain function of the code (or of the result
files in ``docs/benchmarks/``), importable without mkdocs so that the tests call them too.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BENCHMARK_RESULTS = ROOT / "docs" / "benchmarks"
if str(SRC) not in sys.path:  # the build runs from a clone; the package may not be installed
    sys.path.insert(0, str(SRC))

MARKER = re.compile(r"^<!-- generate: ([a-z_-]+)(?: ([^>]*?))? -->$", re.M)


def _cell(text: Any) -> str:
    """A value as the text of a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return f"`{text}`" if "`" not in str(text) else f"``{text}``"


# ---- the command line ----------------------------------------------------------------------


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    from trainpace.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise RuntimeError("trainpace's parser has no verbs")


def _option_row(action: argparse.Action) -> str | None:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
        return None
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            names += f" {metavar if isinstance(metavar, str) else ' '.join(metavar)}"
    else:
        names = str(action.metavar or action.dest)
    default = action.default
    shown = ("" if default in (None, argparse.SUPPRESS, False) or action.nargs == 0
             else _code(default))
    text = (action.help or "").replace("%(default)s", str(default)).replace("%%", "%")
    return f"| {_code(names)} | {_cell(text)} | {shown} |"


def cli_verbs() -> str:
    """One row per verb: its name (a link to its section) and its help."""
    rows = ["| verb | what it does |", "|---|---|"]
    for name, parser in _verb_parsers().items():
        rows.append(f"| [`trainpace {name}`](#trainpace-{name}) | {_cell(parser.description)} |")
    return "\n".join(rows)


def cli_reference() -> str:
    """Every verb: its help, its usage line and a table of its arguments and options."""
    from trainpace.cli import VERBS

    lines = []
    for name, parser in _verb_parsers().items():
        assert name in VERBS
        parser.prog = f"trainpace {name}"
        lines += [f"## `trainpace {name}`", "", parser.description or "", "",
                  "```text", parser.format_usage().strip(), "```", "",
                  "| argument | what it does | default |", "|---|---|---|"]
        lines += [row for row in map(_option_row, parser._actions) if row]
        lines.append("")
    return "\n".join(lines)


# ---- the Python API ------------------------------------------------------------------------


def api_reference() -> str:
    """A mkdocstrings block for every public name (``trainpace.__all__``), where it is defined."""
    import trainpace

    lines = []
    for name in trainpace.__all__:
        if name.startswith("_"):
            continue
        module = trainpace._LAZY.get(name, "trainpace.errors")
        if name == "diagnose":
            module = "trainpace.diagnosis"
        lines += [f"::: {module}.{name}", ""]
    lines += ["## Integrations", ""]
    for module_name in ("trainpace.integrations.lightning", "trainpace.integrations.huggingface"):
        tree = ast.parse((SRC / (module_name.replace(".", "/") + ".py")).read_text())
        public = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                      and any(getattr(t, "id", None) == "__all__" for t in n.targets))
        lines += [f"::: {module_name}.{name}\n" for name in public]
    return "\n".join(lines)


# ---- the Meter's keywords ------------------------------------------------------------------


def meter_options() -> str:
    """``MeterConfig``'s fields (the Meter's keywords): default and docstring of each."""
    tree = ast.parse((SRC / "trainpace" / "config.py").read_text())
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MeterConfig")
    rows = ["| keyword | default | meaning |", "|---|---|---|"]
    body = config.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        doc = ""
        if i + 1 < len(body) and isinstance(body[i + 1], ast.Expr):
            value = body[i + 1].value  # type: ignore[attr-defined]
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                doc = inspect.cleandoc(value.value)
        default = ast.unparse(node.value) if node.value is not None else "(required)"
        if default.startswith("field("):
            default = "(see meaning)"
        doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", doc).replace("``", "`")
        rows.append(f"| `{node.target.id}` | `{_cell(default)}` | {_cell(doc)} |")
    return "\n".join(rows)


# ---- metric names --------------------------------------------------------------------------


def metric_names() -> str:
    """The sinks' tags (``sinks/names.py``), with the Prometheus name of each."""
    from trainpace.sinks import names

    def unit(scale: float) -> str:
        return "" if scale == 1.0 else f" (×{scale:g} of the figure)"

    lines = ["### Every window", "", "| tag | Prometheus gauge | from the window's figure |",
             "|---|---|---|"]
    for figure, (tag, scale) in names.WINDOW_TAGS.items():
        lines.append(f"| `{tag}` | `{names.prometheus_name(tag)}` | `{figure}`{unit(scale)} |")
    lines += ["", "### At the end of the run", "",
              "| tag | Prometheus gauge | from `summary.json` |", "|---|---|---|"]
    for (section, key), (tag, scale) in names.SUMMARY_TAGS.items():
        lines.append(f"| `{tag}` | `{names.prometheus_name(tag)}` | "
                     f"`{section}.{key}`{unit(scale)} |")
    lines += ["", f"Each point is drawn at its window's last optimizer step; loggers with a step "
              f"counter of their own get it as `{names.STEP_TAG}` "
              f"(`{names.prometheus_name(names.STEP_TAG)}`). The diagnosed bottleneck is the "
              f"string `{names.BOTTLENECK_TAG}` in the run summaries that take one."]
    return "\n".join(lines)


# ---- summary.json --------------------------------------------------------------------------


def _field_notes(cls: type) -> dict[str, tuple[str, bool]]:
    """field -> (its comment in the source, whether it is an extension of the contract)."""
    notes: dict[str, tuple[str, bool]] = {}
    pending: list[str] = []
    extension = False
    for raw in inspect.getsource(cls).splitlines()[1:]:
        line = raw.strip()
        if line.startswith("#"):
            comment = line.lstrip("# ")
            if comment.lower().startswith("extension"):
                extension = True
                comment = comment.split(":", 1)[1].strip() if ":" in comment else ""
            if (comment and not comment.startswith("(")) or comment:
                pending.append(comment)
            continue
        match = re.match(r"(\w+): ([^=#]+?)(?: = [^#]*)?(?:#\s*(.*))?$", line)
        if match and not line.startswith(("def ", "@", '"""')):
            trailing = match.group(3) or ""
            notes[match.group(1)] = (" ".join([*pending, trailing]).strip(), extension)
            pending = []
        elif not line:
            pending = []
    return notes


def summary_schema() -> str:
    """Each section of ``trainpace.summary/1``: its keys, types and what the code says of them."""
    from trainpace import summary as module

    nested = module._NESTED
    lines = [f"Schema `{module.SCHEMA}`. Keys marked *ext.* are extensions: present in every "
             "summary this version writes, outside the contract readers may rely on.", ""]
    sections: list[tuple[str, type]] = [("(top level)", module.Summary)]
    prefixes = {module.Summary: "", module.Diagnosis: "diagnosis.", module.Time: "time.",
                module.Goodput: "goodput.", module.GoodputRun: "goodput.runs[]."}
    for (owner, key), cls in nested.items():
        prefix = prefixes[owner]
        label = f"{prefix}{key}" + ("[]" if (owner, key) in module._LISTS else "")
        sections.append((label, cls))
    for label, cls in sections:
        notes = _field_notes(cls)
        doc = inspect.getdoc(cls) or ""
        lines += [f"### `{label}`" if label != "(top level)" else "### Top level", "",
                  doc.splitlines()[0] if doc else "", "",
                  "| key | type | notes |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            note, extension = notes.get(f.name, ("", False))
            ext = "*ext.* " if extension else ""
            lines.append(f"| `{f.name}` | `{_cell(f.type)}` | {ext}{_cell(note)} |")
        lines.append("")
    lines.append("Bottlenecks: " + ", ".join(f"`{b}`" for b in module.BOTTLENECKS)
                 + ". Severities, mildest first: "
                 + ", ".join(f"`{s}`" for s in module.SEVERITIES) + ".")
    return "\n".join(lines)


# ---- thresholds and the finding catalogue --------------------------------------------------


def rule_order() -> str:
    """The rules in the order the diagnosis runs them, each with the first line of its doc."""
    import inspect as _inspect

    from trainpace.diagnosis.rules import RULES

    lines = []
    for number, (name, rule) in enumerate(RULES, start=1):
        doc = (_inspect.getdoc(rule) or "").split("\n\n")[0].replace("\n", " ")
        lines.append(f"{number}. **{name}** (`{rule.__name__}`): {doc}")
    return "\n".join(lines)


def thresholds() -> str:
    """Every threshold of the rules, its default and its source."""
    from trainpace.diagnosis import threshold_table

    lines = ["| threshold | default | source |", "|---|---|---|"]
    lines += [f"| `{row['name']}` | {row['default']:g} | {_cell(row['source'])} |"
              for row in threshold_table()]
    return "\n".join(lines)


@dataclasses.dataclass
class FindingEntry:
    """What the code says of one finding id: where it is made and from what."""

    id: str
    rule: str
    function: str
    trigger: str
    severities: set[str] = dataclasses.field(default_factory=set)
    thresholds: set[str] = dataclasses.field(default_factory=set)
    evidence: set[str] = dataclasses.field(default_factory=set)
    titles: list[str] = dataclasses.field(default_factory=list)
    advice: list[str] = dataclasses.field(default_factory=list)


def _strings(node: ast.AST) -> list[str]:
    """The string constants an expression can take (``"a" if x else "b"`` gives both)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def _text(node: ast.AST) -> str | None:
    """A string expression's text, its formatted values shown as ``…``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return (left or "…") + (right or "…") if left or right else None
    return None


class _Module:
    def __init__(self, path: Path) -> None:
        self.tree = ast.parse(path.read_text())
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _findings_made(function: ast.FunctionDef) -> list[tuple[list[str], ast.Call]]:
    made = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name == "Finding":
            for kw in node.keywords:
                if kw.arg == "id":
                    ids = _strings(kw.value)
                    if not ids and isinstance(kw.value, ast.Name):
                        ids = _assigned_strings(function, kw.value.id)
                    made.append((ids, node))
        elif name == "verdict" and node.args:
            ids = _strings(node.args[0])
            if not ids and isinstance(node.args[0], ast.Name):
                ids = _assigned_strings(function, node.args[0].id)
            made.append((ids, node))
    return made


def _assigned_strings(function: ast.FunctionDef, variable: str) -> list[str]:
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == variable for t in node.targets
        ):
            found += _strings(node.value)
    return found


def _argument(call: ast.Call, keyword: str, position: int) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _assignments(function: ast.FunctionDef, variable: str) -> list[ast.AST]:
    """The values ``variable`` is given in ``function`` (``x = ...`` and ``x: T = ...``)."""
    def gives(node: ast.AST) -> bool:
        if isinstance(node, ast.Assign):
            return any(isinstance(t, ast.Name) and t.id == variable for t in node.targets)
        return (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == variable and node.value is not None)

    values: list[ast.AST] = [node.value for node in ast.walk(function)
                             if gives(node)]
    return values


def _dict_keys(node: ast.AST | None, function: ast.FunctionDef) -> set[str]:
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant)
                and isinstance(k.value, str)}
    if isinstance(node, ast.Name):
        keys: set[str] = set()
        for value in _assignments(function, node.id):
            if isinstance(value, ast.Dict):
                keys |= _dict_keys(value, function)
        for sub in ast.walk(function):
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                            and target.value.id == node.id):
                        keys |= set(_strings(target.slice))
        return keys
    return set()


def _advice_texts(node: ast.AST | None, function: ast.FunctionDef,
                  seen: frozenset[str] = frozenset()) -> list[str]:
    """The texts an expression can hold, following the variables it names in ``function``."""
    if node is None:
        return []
    if isinstance(node, (ast.List, ast.Tuple)):
        return [text for element in node.elts for text in _advice_texts(element, function, seen)]
    if isinstance(node, ast.Starred):
        return _advice_texts(node.value, function, seen)
    if isinstance(node, ast.IfExp):
        return (_advice_texts(node.body, function, seen)
                + _advice_texts(node.orelse, function, seen))
    if isinstance(node, ast.Name):
        if node.id in seen:
            return []
        seen = seen | {node.id}
        texts = []
        for value in _assignments(function, node.id):
            texts += _advice_texts(value, function, seen)
        for sub in ast.walk(function):
            if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                    and isinstance(sub.func.value, ast.Name) and sub.func.value.id == node.id
                    and sub.func.attr in ("append", "insert") and sub.args):
                texts += _advice_texts(sub.args[-1], function, seen)
        return texts
    if isinstance(node, ast.Call) and (name := _call_name(node)):
        return [f"computed by `{name}()` from the evidence"]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        made_by = [_call_name(v) for v in _assignments(function, node.value.id)
                   if isinstance(v, ast.Call)]
        return [f"computed by `{made_by[0]}()` from the evidence" if made_by and made_by[0]
                else f"computed by the rule (`{node.value.id}.{node.attr}`)"]
    text = _text(node)
    if isinstance(node, ast.JoinedStr) and (not text or _thin(text)):
        # all figures ("{where}: {fix} — {gain}"): the texts are in the names it formats
        named = [v.value.id for v in node.values
                 if isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)]
        texts = [t for name in named if name not in seen
                 for t in _advice_texts(ast.Name(id=name), function, seen)]
        texts += [f"computed by `{made}()` from the evidence" for name in named
                  if (made := _unpacked_from(function, name))]
        if texts:
            return texts
    return [text] if text else []


def _thin(text: str) -> bool:
    """A text that is all figures ("…: …") says nothing without them."""
    return len(re.sub(r"[^A-Za-z]", "", text)) < 8


def _unpacked_from(function: ast.FunctionDef, variable: str) -> str | None:
    """The function whose result ``variable`` is unpacked from (``a, b = f(...)``), if any."""
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and any(isinstance(t, ast.Tuple) and any(
                    isinstance(e, ast.Name) and e.id == variable for e in t.elts)
                    for t in node.targets)):
            return _call_name(node.value)
    return None


def _add(texts: list[str], new: list[str]) -> None:
    # a text that is all figures ("…: …") says nothing without them
    texts += [text for text in new if text not in texts and not _thin(text)]


def finding_catalogue() -> list[FindingEntry]:
    """Every finding id the diagnosis (and `trainpace run`) can give, from the code itself.

    Each rule of ``RULES`` is followed into the functions it calls in the diagnose package;
    for each ``Finding``/``verdict`` made there: its id(s), severities, the evidence keys of
    its dict, the advice texts, and the thresholds read by the function and its callees.
    """
    from trainpace.diagnosis import Thresholds
    from trainpace.diagnosis.rules import RULES

    threshold_names = {f.name for f in dataclasses.fields(Thresholds)}
    package = SRC / "trainpace" / "diagnosis"
    modules = [_Module(p) for p in sorted(package.glob("*.py"))]
    functions = {name: fn for m in modules for name, fn in m.functions.items()}

    def reachable(name: str) -> list[ast.FunctionDef]:
        seen: dict[str, ast.FunctionDef] = {}
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in functions:
                continue
            seen[current] = functions[current]
            todo += [n for node in ast.walk(functions[current])
                     if isinstance(node, ast.Call) and (n := _call_name(node))]
        return list(seen.values())

    def thresholds_read(fn: ast.FunctionDef) -> set[str]:
        return {n.attr for n in ast.walk(fn)
                if isinstance(n, ast.Attribute) and n.attr in threshold_names}

    entries: dict[str, FindingEntry] = {}
    for rule_name, rule in RULES:
        reached = reachable(rule.__name__)
        read = set().union(*(thresholds_read(fn) for fn in reached))
        for fn in reached:
            for ids, call in _findings_made(fn):
                for finding_id in ids:
                    entry = entries.setdefault(finding_id, FindingEntry(
                        id=finding_id, rule=rule_name, function=fn.name,
                        trigger=(ast.get_docstring(functions[rule.__name__]) or "")))
                    own_doc = ast.get_docstring(fn)
                    if own_doc and fn.name != rule.__name__ and own_doc not in entry.trigger:
                        entry.trigger += ("\n\n" if entry.trigger else "") + own_doc
                    is_verdict = _call_name(call) == "verdict"
                    severity = _argument(call, "severity", 1 if is_verdict else -1)
                    entry.severities |= set(_strings(severity)) if severity else set()
                    if severity is not None and not _strings(severity):
                        entry.severities.add("banded")
                    entry.evidence |= _dict_keys(
                        _argument(call, "evidence", 3 if is_verdict else -1), fn)
                    _add(entry.titles, _advice_texts(
                        _argument(call, "title", 2 if is_verdict else -1), fn))
                    _add(entry.advice, _advice_texts(
                        _argument(call, "advice", 4 if is_verdict else -1), fn))
                    entry.thresholds |= read
    blind = _Module(SRC / "trainpace" / "integrations" / "blind_spots.py")
    for tree_fn in ast.walk(blind.tree):
        if not isinstance(tree_fn, ast.FunctionDef):
            continue
        for ids, call in _findings_made(tree_fn):
            for finding_id in ids:
                entry = entries.setdefault(finding_id, FindingEntry(
                    id=finding_id, rule="`trainpace run`'s blind spots", function=tree_fn.name,
                    trigger=ast.get_docstring(tree_fn) or ""))
                entry.severities |= set(_strings(_argument(call, "severity", -1) or ast.Pass()))
                entry.evidence |= _dict_keys(_argument(call, "evidence", -1), tree_fn)
                _add(entry.titles, _advice_texts(_argument(call, "title", -1), tree_fn))
                _add(entry.advice, _advice_texts(_argument(call, "advice", -1), tree_fn))
    entries.setdefault("checks", FindingEntry(
        id="checks", rule="(always last)", function="diagnose",
        trigger="Always present: what was checked, what could not be (and which source was "
                "missing), and the bottleneck.",
        severities={"info"}, evidence={"bottleneck_finding", "checked", "not_checked"}))
    return list(entries.values())


def findings() -> str:
    """The catalogue as Markdown: one section per finding id, in the rules' order."""
    from trainpace.diagnosis import SOURCES, Thresholds

    defaults = Thresholds()
    lines = []
    for entry in finding_catalogue():
        lines += [f"### `{entry.id}`", "",
                  f"*Rule:* {entry.rule} · *made in:* `{entry.function}()` · *severity:* "
                  + ", ".join(sorted(entry.severities) or ["—"]), ""]
        if entry.trigger:
            lines += [entry.trigger.strip(), ""]
        if entry.titles:
            lines += ["*As the report words it:*", ""]
            lines += [f"- {_cell(text)}" for text in entry.titles]
            lines.append("")
        if entry.thresholds:
            lines += [f"Thresholds the {entry.rule} rule reads:", "",
                      "| threshold | default | source |", "|---|---|---|"]
            lines += [f"| `{name}` | {getattr(defaults, name):g} | {_cell(SOURCES[name])} |"
                      for name in sorted(entry.thresholds)]
            lines.append("")
        if entry.evidence:
            lines += ["*Evidence keys:* " + ", ".join(f"`{k}`" for k in sorted(entry.evidence)),
                      ""]
        if entry.advice:
            lines += ["*Advice* (`…` is a figure from the evidence):", ""]
            lines += [f"- {_cell(text)}" for text in entry.advice]
            lines.append("")
    return "\n".join(lines)


def finding_index() -> str:
    """One line per finding id, linking to its entry."""
    rows = ["| finding | rule | severity |", "|---|---|---|"]
    rows += [f"| [`{e.id}`](#{e.id.replace('_', '_')}) | {e.rule} | "
             f"{', '.join(sorted(e.severities)) or '—'} |" for e in finding_catalogue()]
    return "\n".join(rows)


# ---- performance ---------------------------------------------------------------------------


def _figure(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(_figure, value))
    return _cell(value)


def _flat(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested figures as one level of columns (``cpu ratio``); raw samples (lists of more
    than a few values) are left out of the table."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        column = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat(value, column + " "))
        elif not (isinstance(value, list) and len(value) > 3):
            flat[column] = value
    return flat


def benchmark(name: str) -> str:
    """``docs/benchmarks/NAME.json`` (written by ``benchmarks/NAME.py``) as tables."""
    path = BENCHMARK_RESULTS / f"{name}.json"
    if not path.exists():
        return (f"!!! note \"Not measured yet\"\n    `benchmarks/{name}.py` has not written "
                f"`docs/benchmarks/{name}.json`; run it to fill this table.")
    result = json.loads(path.read_text())
    machine = result.get("machine", {})
    kind = "a quick run (`--quick`): fewer rounds, wider intervals" if result.get("quick") \
        else "a full run"
    before, after = machine.get("load_before"), machine.get("load_after")
    load = (f"load average {_figure(before)} before and {_figure(after)} after"
            if before else f"load average (1, 5, 15 min) {_figure(after)} at the end")
    lines = [f"*Measured {result.get('date', '?')}* on {machine.get('cpu', '?')}, "
             f"{machine.get('cores', '?')} cores, {load}; Python {machine.get('python', '?')}, "
             f"torch {machine.get('torch', '?')}; {kind}. Command: "
             f"`{result.get('command', '?')}`.", ""]
    rows = [_flat(row) for row in result.get("rows") or []]
    if rows:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        if len(columns) <= 8:
            lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(_figure(row.get(c, "")) for c in columns) + " |"
                      for row in rows]
        else:  # many figures per row: one column per row, one line per figure
            label, *figures_of_row = columns
            lines += ["| " + " | ".join([_cell(label)] + [_figure(r.get(label, "")) for r in rows])
                      + " |", "|" + "---|" * (len(rows) + 1)]
            lines += ["| " + " | ".join([_cell(c)] + [_figure(r.get(c, "")) for r in rows])
                      + " |" for c in figures_of_row]
        lines.append("")
    figures = _flat(result.get("figures") or {})
    if figures:
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_figure(v)} |" for k, v in figures.items()]
    return "\n".join(lines)


# ---- the source layout ---------------------------------------------------------------------


def _first_paragraph(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line ("" without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    return re.sub(r":[a-z]+:`~?", "`", paragraph)  # Sphinx roles read as plain code


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def package_layout() -> str:
    """A table of the package's modules and subpackages, each with its docstring's first
    paragraph (read from the source, nothing imported), and each subpackage's modules."""
    package = SRC / "trainpace"
    rows = ["| module | its job | modules inside |", "|---|---|---|"]
    rows += [f"| {_code(path.name)} | {_cell(_first_paragraph(path))} | |"
             for path in _modules(package)]
    for folder in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
        inside = [p.stem for p in _modules(folder)]
        inside += [f"{p.name}/" for p in sorted(folder.iterdir()) if (p / "__init__.py").is_file()]
        job = _cell(_first_paragraph(folder / "__init__.py"))
        rows.append(f"| {_code(folder.name + '/')} | {job} | {_cell(', '.join(inside))} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[..., str]] = {
    "cli": cli_reference,
    "cli_verbs": cli_verbs,
    "api": api_reference,
    "meter_options": meter_options,
    "metrics": metric_names,
    "summary": summary_schema,
    "thresholds": thresholds,
    "rules": rule_order,
    "findings": findings,
    "finding_index": finding_index,
    "benchmark": benchmark,
    "layout": package_layout,
}


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- generate: NAME [ARG] -->`` replaced by its block."""

    def replace(match: re.Match[str]) -> str:
        generator = GENERATORS[match.group(1)]
        args: Iterable[str] = match.group(2).split() if match.group(2) else ()
        return generator(*args)

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The mkdocs hook."""
    return expand(markdown)
