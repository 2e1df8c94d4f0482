"""Typed service configuration: one frozen dataclass per service.

Values come from a JSON file (`--config PATH`, written by `ratchet dev up`)
and are overridden by environment variables `<PREFIX><FIELD>` (upper case).
Unknown keys and wrong types fail at start-up with the field named.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import typing
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the field."""


def field(default: Any = dataclasses.MISSING, *, doc: str, default_factory: Any = dataclasses.MISSING) -> Any:
    """A config field with its documentation (unit and meaning)."""
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


def _coerce(name: str, kind: Any, value: Any) -> Any:
    origin = typing.get_origin(kind)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"config field {name!r} must be a boolean, got {value!r}")
    if kind in (int, float):
        what = "an integer" if kind is int else "a number"
        try:
            if isinstance(value, bool):
                raise TypeError
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError  # int(2.5) would be 2: a typo must not pass as a smaller number
            return kind(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"config field {name!r} must be {what}, got {value!r}") from None
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"config field {name!r} must be a string, got {value!r}")
        return value
    if origin in (list, dict):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(f"config field {name!r} must be JSON, got {value!r}") from None
        if not isinstance(value, origin):
            raise ConfigError(f"config field {name!r} must be a {origin.__name__}, got {value!r}")
        return _coerce_items(name, kind, value)
    return value


def _coerce_items(name: str, kind: Any, value: list | dict) -> list | dict:
    """Each element of a list[X] (each value of a dict[str, X]) coerced as X, the bad one named."""
    args = typing.get_args(kind)
    if isinstance(value, list):
        if not args:
            return value
        return [_coerce(f"{name}[{i}]", args[0], v) for i, v in enumerate(value)]
    if len(args) != 2:
        return value
    for k in value:
        if not isinstance(k, str):
            raise ConfigError(f"config field {name!r} must have string keys, got {k!r}")
    return {k: _coerce(f"{name}.{k}", args[1], v) for k, v in value.items()}


def load_config(cls: type[T], path: str | os.PathLike | None = None, *, env_prefix: str = "",
                overrides: dict | None = None) -> T:
    """Build cls from a JSON file, environment overrides and explicit overrides."""
    data: dict[str, Any] = {}
    if path:
        try:
            data = json.loads(pathlib.Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"config file {path} is not valid JSON: {e}") from None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ConfigError(f"unknown config field(s) {sorted(unknown)} for {cls.__name__}; known: {sorted(fields)}")
    for name in fields:
        env = os.environ.get(f"{env_prefix}{name}".upper()) if env_prefix else None
        if env is not None:
            data[name] = env
    data.update(overrides or {})
    missing = [name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"config field(s) {missing} of {cls.__name__} required (no default)")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(name, hints[name], value)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{cls.__name__}: {e}") from None


def describe(cls: type) -> str:
    """A table of the fields with defaults and docs, for --help."""
    lines = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
        lines.append(f"  {f.name} = {default!r}: {f.metadata.get('doc', '')}")
    return "\n".join(lines)
