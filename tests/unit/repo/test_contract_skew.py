"""Adjacent releases interoperate (docs/contracts.md): every message of the previous
release's contract (protos/baseline.binpb) and the same message of the current one read
each other's bytes without losing a field, in both directions."""

from __future__ import annotations

import functools
import importlib
import pathlib

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor

ROOT = pathlib.Path(__file__).resolve().parents[3]
BASELINE = ROOT / "protos" / "baseline.binpb"


def _previous_pool() -> tuple[descriptor_pool.DescriptorPool, list[descriptor_pb2.FileDescriptorProto]]:
    files = descriptor_pb2.FileDescriptorSet.FromString(BASELINE.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        pool.Add(f)
    return pool, [f for f in files if f.package.startswith("ratchet.")]


def _messages() -> list[tuple[str, str]]:
    """(proto file, full message name) of every ratchet message in the previous release."""
    _, files = _previous_pool()
    out = []
    def walk(file: str, prefix: str, msgs) -> None:
        for m in msgs:
            if not m.options.map_entry:
                out.append((file, f"{prefix}.{m.name}"))
                walk(file, f"{prefix}.{m.name}", m.nested_type)
    for f in files:
        walk(f.name, f.package, f.message_type)
    return out


def _current_class(proto_file: str, full_name: str):
    module = importlib.import_module("ratchet." + proto_file.removeprefix("ratchet/").removesuffix(".proto")
                                     .replace("/", ".") + "_pb2")
    desc = module.DESCRIPTOR.message_types_by_name.get(full_name.split(".")[-1])
    if desc is None or desc.full_name != full_name:  # nested: find it by its full name
        desc = module.DESCRIPTOR.pool.FindMessageTypeByName(full_name)
    return message_factory.GetMessageClass(desc)


def _fill(msg, depth: int = 0) -> None:
    """Every field of msg set to a value that is not the default (oneofs: the first member)."""
    seen_oneofs = set()
    for field in msg.DESCRIPTOR.fields:
        if field.containing_oneof is not None:
            if field.containing_oneof.name in seen_oneofs:
                continue
            seen_oneofs.add(field.containing_oneof.name)
        value = _value(field, msg, depth)
        if value is None:
            continue
        if field.is_repeated and not _is_map(field):
            target = getattr(msg, field.name)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                _fill(target.add(), depth + 1)
            else:
                target.append(value)
        elif _is_map(field):
            key_f, val_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            key = _scalar(key_f)
            if val_f.type == FieldDescriptor.TYPE_MESSAGE:
                _fill(getattr(msg, field.name)[key], depth + 1)
            else:
                getattr(msg, field.name)[key] = _scalar(val_f)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            _fill(getattr(msg, field.name), depth + 1)
        else:
            setattr(msg, field.name, value)


@functools.cache
def _baseline_enum_values() -> dict[str, frozenset[int]]:
    """Every enum of the previous release by full name, with its value numbers."""
    _, files = _previous_pool()
    out: dict[str, frozenset[int]] = {}
    def walk(prefix: str, enums, msgs) -> None:
        for e in enums:
            out[f"{prefix}.{e.name}"] = frozenset(v.number for v in e.value)
        for m in msgs:
            walk(f"{prefix}.{m.name}", m.enum_type, m.nested_type)
    for f in files:
        walk(f.package, f.enum_type, f.message_type)
    return out


def _is_map(field) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _value(field, msg, depth: int):
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return None if depth > 3 else True  # (recursive messages stop a few levels down)
    return _scalar(field)


def _scalar(field):
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return f"v-{field.number}"
    if t == FieldDescriptor.TYPE_BYTES:
        return f"b-{field.number}".encode()
    if t == FieldDescriptor.TYPE_BOOL:
        return True
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return 1.5
    if t == FieldDescriptor.TYPE_ENUM:
        # The last value the previous release knows too: a value added since is unknown to
        # N-1 by design (docs/contracts.md, rule 2: only new paths produce it).
        values = field.enum_type.values
        known = _baseline_enum_values().get(field.enum_type.full_name)
        if known is not None:
            values = [v for v in values if v.number in known] or values
        return values[-1].number if len(values) > 1 else values[0].number
    return field.number + 1  # every integer kind


@pytest.mark.parametrize("proto_file, name", _messages(), ids=lambda v: v)
def test_the_previous_and_the_current_message_read_each_other(proto_file, name):
    pool, _ = _previous_pool()
    previous = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    try:
        current = _current_class(proto_file, name)
    except (KeyError, ModuleNotFoundError):
        pytest.fail(f"{name} of the previous release is gone from the current contract: a release keeps it "
                    "(mark it deprecated) until the one after")
    old = previous()
    _fill(old)
    as_current = current.FromString(old.SerializeToString())
    # Every field N-1 sends, N reads as the same field with the same value (by name too: the
    # REST/JSON form is the same contract), and what N writes back N-1 reads unchanged.
    assert _as_dict(as_current) == _as_dict(old), "N reads N-1's message differently"
    assert previous.FromString(as_current.SerializeToString()) == old, "N-1 -> N -> N-1 lost data"
    new = current()
    _fill(new)
    as_previous = previous.FromString(new.SerializeToString())
    assert current.FromString(as_previous.SerializeToString()) == new, "N -> N-1 -> N lost data"
    # N-1 reads every field of N it knows as N meant it (fields N added are unknown to it).
    known = _known_to(previous.DESCRIPTOR, _as_dict(new))
    assert _as_dict(as_previous) == known, "N-1 reads N's message differently"


def _known_to(descriptor, value: dict) -> dict:
    """value (a message as a dict) without the fields, at any depth, that descriptor's
    release does not have."""
    out = {}
    for key, v in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            continue
        sub = field.message_type
        if sub is not None and not _is_map(field) and sub.full_name.startswith("ratchet."):
            v = [_known_to(sub, x) for x in v] if isinstance(v, list) else _known_to(sub, v)
        out[key] = v
    return out


def _as_dict(msg) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def test_the_check_reads_every_contract_file():
    files = {f for f, _ in _messages()}
    assert {"ratchet/api/tasks/v1/tasks.proto", "ratchet/internal/history/v1/history.proto"} <= files
    assert len(_messages()) > 100
