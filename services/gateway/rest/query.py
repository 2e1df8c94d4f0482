"""Query parameters of a request without a body, read into its message.

Generic over the descriptors (google.api.http semantics): every field of the
request message that is not bound by the path may come as a query parameter
named by its field path (`page_size`, `filter.task_type` for a nested
message). Scalars from their text, enums by value name (`TASK_STATE_FAILED`)
or by the name without the enum's prefix (`FAILED`), Timestamps as RFC 3339,
Durations as "1.5s", repeated fields by repeating the parameter. Unknown
parameters and bad values are refused with a message naming the parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format
from google.protobuf.message import Message

from ratchet.libs.rpc.errors import InvalidArgument

_FD = _descriptor.FieldDescriptor
_INTS = {_FD.TYPE_INT32, _FD.TYPE_SINT32, _FD.TYPE_SFIXED32, _FD.TYPE_UINT32, _FD.TYPE_FIXED32,
         _FD.TYPE_INT64, _FD.TYPE_SINT64, _FD.TYPE_SFIXED64, _FD.TYPE_UINT64, _FD.TYPE_FIXED64}
_FLOATS = {_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT}
# Well-known messages whose JSON form is one string, so one parameter can carry them.
_STRING_MESSAGES = {"google.protobuf.Timestamp": "an RFC 3339 instant such as 2026-01-01T00:00:00Z",
                    "google.protobuf.Duration": "a duration in seconds such as 1.5s",
                    "google.protobuf.FieldMask": "comma-separated field paths"}
_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def enum_prefix(e: _descriptor.EnumDescriptor) -> str:
    """TaskState -> "TASK_STATE_": the prefix buf's STANDARD lint puts on every value."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", e.name).upper() + "_"


def enum_names(e: _descriptor.EnumDescriptor) -> list[str]:
    """Every name a parameter of this enum accepts: full names, then short ones."""
    prefix = enum_prefix(e)
    full = [v.name for v in e.values]
    return full + [n[len(prefix):] for n in full if n.startswith(prefix) and len(n) > len(prefix)]


def query_field(msg: _descriptor.Descriptor, path: str) -> _descriptor.FieldDescriptor | None:
    """The field a parameter names: a dotted path through singular message fields."""
    *parents, leaf = path.split(".")
    for name in parents:
        f = msg.fields_by_name.get(name)
        if f is None or f.type != _FD.TYPE_MESSAGE or f.is_repeated or f.message_type.full_name in _STRING_MESSAGES:
            return None
        msg = f.message_type
    f = msg.fields_by_name.get(leaf)
    if f is None or not settable(f):
        return None
    return f


def settable(f: _descriptor.FieldDescriptor) -> bool:
    """True when one query parameter can carry a value of this field."""
    if f.type == _FD.TYPE_MESSAGE:
        return f.message_type.full_name in _STRING_MESSAGES and not f.is_repeated
    return True


def query_fields(msg: _descriptor.Descriptor, skip: Iterable[str] = (), prefix: str = "",
                 seen: frozenset = frozenset()) -> list[tuple[str, _descriptor.FieldDescriptor]]:
    """Every (parameter name, field) a request message accepts, path-bound fields skipped."""
    out = []
    skip = set(skip)
    for f in msg.fields:
        name = prefix + f.name
        if name in skip:
            continue
        if settable(f):
            out.append((name, f))
        elif f.type == _FD.TYPE_MESSAGE and not f.is_repeated and f.message_type.full_name not in seen:
            out += query_fields(f.message_type, skip, name + ".", seen | {msg.full_name})
    return out


def _scalar(f: _descriptor.FieldDescriptor, text: str, name: str):
    """One parameter value as its proto3 JSON form (ParseDict checks ranges and formats)."""
    if f.type == _FD.TYPE_ENUM:
        prefix = enum_prefix(f.enum_type)
        for candidate in (text, prefix + text, text.upper(), prefix + text.upper()):
            if candidate in f.enum_type.values_by_name:
                return candidate
        raise InvalidArgument(f"query parameter {name}={text[:80]!r} is not one of "
                              f"{', '.join(enum_names(f.enum_type))}")
    if f.type == _FD.TYPE_BOOL:
        if text.lower() not in _BOOLS:
            raise InvalidArgument(f"query parameter {name}={text[:80]!r} must be true or false")
        return _BOOLS[text.lower()]
    if f.type in _INTS:
        if not re.fullmatch(r"-?[0-9]{1,20}", text):
            raise InvalidArgument(f"query parameter {name}={text[:80]!r} must be an integer")
        return int(text)
    if f.type in _FLOATS:
        try:
            return float(text)
        except ValueError:
            raise InvalidArgument(f"query parameter {name}={text[:80]!r} must be a number") from None
    if f.type == _FD.TYPE_MESSAGE and f.message_type.full_name == "google.protobuf.Timestamp":
        # An unencoded "+01:00" offset arrives as " 01:00" ('+' means space in a query string).
        return re.sub(r" ([0-9]{2}:[0-9]{2})$", r"+\1", text)
    return text


def _set(data: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        data = data.setdefault(p, {})
    data[leaf] = value


def parse_query(query, msg_type: _descriptor.Descriptor, path_fields: Iterable[str]) -> dict:
    """Query parameters (a multidict) as proto3 JSON for msg_type; InvalidArgument naming what is wrong."""
    bound = set(path_fields)
    data: dict = {}
    for name in sorted(set(query)):
        values = query.getall(name)
        f = None if name in bound or name.split(".")[0] in bound else query_field(msg_type, name)
        if f is None:
            accepted = ", ".join(n for n, _ in query_fields(msg_type, bound)) or "none"
            raise InvalidArgument(f"unknown query parameter {name[:80]!r}; accepted: {accepted}")
        if f.is_repeated:
            _set(data, name, [_scalar(f, v, name) for v in values])
            continue
        if len(values) > 1:
            raise InvalidArgument(f"query parameter {name} is given {len(values)} times; give it once")
        _set(data, name, _scalar(f, values[0], name))
    return data


def check_values(data: dict, msg: Message) -> None:
    """Parse data into msg, naming the parameter whose value does not parse."""
    try:
        json_format.ParseDict(data, msg, ignore_unknown_fields=False)
    except json_format.ParseError:
        pass
    else:
        return
    for name, f in query_fields(msg.DESCRIPTOR):
        value = _lookup(data, name)
        if value is None:
            continue
        probe = type(msg)()
        single: dict = {}
        _set(single, name, value)
        try:
            json_format.ParseDict(single, probe)
        except json_format.ParseError as e:
            hint = _STRING_MESSAGES.get(f.message_type.full_name, "") if f.type == _FD.TYPE_MESSAGE else ""
            raise InvalidArgument(f"query parameter {name}={str(value)[:80]!r} is not valid"
                                  + (f": expected {hint}" if hint else f" ({e})")) from None
    raise InvalidArgument("invalid query parameters")


def _lookup(data: dict, path: str):
    for p in path.split("."):
        if not isinstance(data, dict) or p not in data:
            return None
        data = data[p]
    return data
