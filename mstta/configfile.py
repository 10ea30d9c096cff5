"""Configuration files: YAML mapped onto dataclasses that reject unknown keys.

Layers apply in a fixed order: defaults -> YAML file -> `key=value` overrides -> validation in
`__post_init__`. There is no global config; the dataclass is passed down. The dataclasses live with
what they configure (`mstta.engine.config.EngineConfig`, `mstta.bench.config.DatasetConfig`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

import yaml

from .checks import show as _show
from .errors import UserError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Convert a YAML/CLI value to a field's declared type, or raise a one-line UserError.

    A number the user typed in a form YAML 1.1 reads as a string (`1e-5`) is parsed as written."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except UserError:
                pass
        expected = " or ".join("none" if a is type(None) else _TYPE_WORDS.get(a, str(a)) for a in args)
        raise UserError(f"bad value for '{key}': {_show(value)}; expected {expected}")
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and not isinstance(value, bool):
        if isinstance(value, str):
            try:
                return float(value.strip().replace("_", ""))
            except ValueError:
                pass
        elif isinstance(value, (int, float)):
            try:
                return float(value)
            except OverflowError:  # an integer beyond float range: refused by the bounds as inf
                return math.inf
    if hint is str and isinstance(value, str):
        return value
    if hint in _TYPE_WORDS:
        raise UserError(f"bad value for '{key}': {_show(value)}; expected {_TYPE_WORDS[hint]}")
    return value


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def from_dict(cls: type, data: dict[str, Any] | None, where: str, base: Any = None) -> Any:
    """Build dataclass `cls` from a mapping, on top of `base`; unknown keys are rejected by name."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping of keys to values, got {type(data).__name__}")
    hints = _hints(cls)
    names = [f.name for f in fields(cls)]
    values = {n: getattr(base, n) for n in names} if base is not None else {}
    try:
        for key, value in data.items():
            if key not in hints:
                raise UserError(f"unknown key {_show(key)} in {where}; allowed keys: {', '.join(names)}")
            hint = hints[key]
            if dataclasses.is_dataclass(hint):
                values[key] = from_dict(hint, value, f"{where}.{key}", values.get(key))
            else:
                values[key] = _coerce(value, hint, key)
        return cls(**values)
    except UserError as exc:
        if where in str(exc):
            raise
        raise UserError(f"{where}: {exc}") from None


MAX_CONFIG_BYTES = 1_000_000  # a dataset config is ~1 KB; anything near this is not a config


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int):
        super().__init__(f"duplicate key {_show(key)}")
        self.key, self.line = key, line


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error (PyYAML
    silently keeps the last one). Keys merged in with `<<` may still be overridden."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: SafeLoader reports it
                    continue
                if duplicate:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)


def load_yaml_text(text: str) -> Any:
    """`yaml.safe_load` that refuses duplicate keys (raises a yaml.YAMLError)."""
    return yaml.load(text, Loader=_StrictLoader)  # safe: _StrictLoader is a SafeLoader subclass


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with one-line errors naming the file."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"config file not found: {p}; pass an existing YAML file (see configs/)")
    if not p.is_file():
        raise UserError(f"config file {p} is not a regular file; pass a YAML file (see configs/)")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise UserError(
            f"config file {p} is {p.stat().st_size:,} bytes; a config is a small YAML file "
            f"(limit {MAX_CONFIG_BYTES:,} bytes)"
        )
    try:
        with p.open("rb") as fh:  # at most the limit: a /proc file reports size 0 and may be endless
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UserError(
            f"config file {p} (--config) cannot be read ({exc.strerror or exc}); pass a YAML file (see configs/)"
        ) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(f"config file {p} (--config) is over {MAX_CONFIG_BYTES:,} bytes; a config is a small YAML file")
    try:
        data = load_yaml_text(raw.decode("utf-8-sig"))
    except _DuplicateKey as exc:
        raise UserError(f"{p}: duplicate key {_show(exc.key)} (line {exc.line}); give each key once") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: not valid YAML ({one_line_yaml(exc)})") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's conversion limit)
        raise UserError(f"{p}: a number has too many digits; values are bounded (docs/limits.md)") from None
    except RecursionError:
        raise UserError(f"{p}: not valid YAML (nested too deeply)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a YAML mapping at the top level")
    return data


def one_line_yaml(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """`["k=4", "alpha=0.7"]` -> {"k": 4, "alpha": 0.7} (values parsed as YAML scalars; a value YAML
    cannot read, e.g. an integer past Python's 4,300-digit limit, is kept as typed and refused by
    the field's type check). The one place `--set` strings are parsed."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set {_show(pair)}: expected KEY=VALUE, e.g. --set k=4")
        try:
            out[key] = load_yaml_text(raw) if raw.strip() else None
        except (yaml.YAMLError, RecursionError, ValueError):
            out[key] = raw  # kept as typed; the field's type check names it
    return out
