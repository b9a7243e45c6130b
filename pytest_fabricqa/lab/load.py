"""A lab file found by name or path, read, validated against the model and checked against the lab rules: one
:class:`~pytest_fabricqa.lab.model.LabError` line naming the file, the key, the line where known and what is allowed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from pytest_fabricqa.lab.model import LabError, LabModel
from pytest_fabricqa.lab.rules import check_lab


def resolve_lab_path(value: str, rootdir: Path, labs_dir: str | None = None) -> Path:
    """Turn ``--lab`` into a file: a path to a YAML file, or NAME looked up as ``<labs_dir>/NAME.yaml``."""
    candidate = Path(os.path.expanduser(value))
    if value.endswith((".yaml", ".yml")) or os.sep in value:
        if not candidate.is_absolute():
            candidate = Path.cwd() / candidate
        if not candidate.is_file():
            raise LabError(f"--lab={value}: no such lab file {candidate}; give a YAML path or a lab name")
        return candidate
    folder = Path(labs_dir) if labs_dir else Path("labs")
    if not folder.is_absolute():
        folder = rootdir / folder
    for suffix in (".yaml", ".yml"):
        path = folder / f"{value}{suffix}"
        if path.is_file():
            return path
    known = sorted(p.stem for p in folder.glob("*.y*ml")) if folder.is_dir() else []
    hint = f"known labs: {', '.join(known)}" if known else f"no lab files in {folder}"
    raise LabError(f"--lab={value}: unknown lab name ({hint}); or give a path to a YAML file")


def load_lab(path: Path) -> LabModel:
    """Read and validate a lab file; raise :class:`LabError` (one line) on any problem."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise LabError(f"{path}: cannot read the lab file ({exc.strerror})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise LabError(f"{path}{where}: YAML syntax error: {problem}; fix the YAML") from None
    if data is None:
        raise LabError(f"{path}: the lab file is empty; see labs/rac3.yaml for the format")
    if not isinstance(data, Mapping):
        raise LabError(
            f"{path}:1: the lab file must be a mapping of keys (name, hosts, network, targets, protocols), "
            f"not a {type(data).__name__}"
        )
    try:
        lab = LabModel.model_validate(data)
    except ValidationError as exc:
        raise LabError(_one_line(path, exc, _key_lines(node))) from None
    unmatched_entries = lab.unmatched_thresholds()
    if unmatched_entries:
        loc, problem = unmatched_entries[0]
        line = _key_lines(node).get(loc)
        more = len(unmatched_entries) - 1
        also = f" (and {more} more such pattern{'s' if more > 1 else ''})" if more else ""
        raise LabError(f"{path}{f':{line}' if line else ''}: {'.'.join(loc)}: {problem}{also}")
    check_lab(lab, path, _key_lines(node))
    return lab


def _key_lines(node: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """Map each key path in the YAML document to its 1-based line number."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(n: yaml.Node, path: tuple[str, ...]) -> None:
        lines.setdefault(path, n.start_mark.line + 1)
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(n, yaml.SequenceNode):
            for index, item in enumerate(n.value):
                walk(item, (*path, str(index)))

    if node is not None:
        walk(node, ())
    return lines


def _one_line(path: Path, exc: ValidationError, lines: dict[tuple[str, ...], int]) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc: tuple[str, ...] = ()
    for part in (str(p) for p in first["loc"]):
        # A key that takes one item or a list of them (hosts.NAME.storage) validates a single item as item 0:
        # where the file has no list there, the error names the key as written.
        if part.isdigit() and loc in lines and (*loc, part) not in lines:
            continue
        loc = (*loc, part)
    key = _dotted(loc)
    line = next((lines[loc[:i]] for i in range(len(loc), -1, -1) if loc[:i] in lines), None)
    where = f"{path}:{line}" if line else str(path)
    kind = first["type"]
    if kind == "missing":
        text = f"{key}: required key is missing"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        text = f"{key}: unknown key; check the spelling (see labs/rac3.yaml for the format)"
    elif kind == "literal_error":
        text = f"{key}: {first['input']!r} is not allowed; allowed: {first.get('ctx', {}).get('expected', '')}"
    else:
        msg = first["msg"].removeprefix("Value error, ")
        text = f"{msg}" if kind == "value_error" else f"{msg} (got {first['input']!r})"
        text = f"{key}: {text}" if key else text
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{where}: {text}{more}"


def _dotted(loc: tuple[str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
