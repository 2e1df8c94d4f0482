"""HTTP routes read from the google.api.http options of proto methods.

Path templates follow google/api/http.proto: `/v1/tasks/{task_id}`,
`/v1/{name=projects/*}`, `**`, and a trailing custom verb (`/v1/tasks:batch`).
Nothing here is written per route: every route comes from a descriptor.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse

from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor as _descriptor

_VERBS = ("get", "put", "post", "delete", "patch")


@dataclasses.dataclass(frozen=True)
class Template:
    """A compiled path template: regex, the field path of each variable, the OpenAPI path."""

    text: str
    regex: re.Pattern
    variables: tuple[str, ...]
    openapi_path: str
    literals: int

    def match(self, raw_path: str) -> dict[str, str] | None:
        """Variable values (percent-decoded) if raw_path matches, else None."""
        m = self.regex.fullmatch(raw_path)
        if m is None:
            return None
        return {v: urllib.parse.unquote(m.group(i + 1)) for i, v in enumerate(self.variables)}


def _split_verb(text: str) -> tuple[str, str]:
    last = text.rfind("/")
    colon = text.rfind(":")
    if colon > last and "}" not in text[colon:]:
        return text[:colon], text[colon + 1:]
    return text, ""


def _segments(segs: list[str], template: str) -> tuple[str, int]:
    parts, literals = [], 0
    for i, seg in enumerate(segs):
        if seg == "*":
            parts.append("[^/]+")
        elif seg == "**":
            if i != len(segs) - 1:
                raise ValueError(f"'**' must be the last segment in {template!r}")
            parts.append(".+")
        elif re.fullmatch(r"[A-Za-z0-9_.~\-]+", seg):
            parts.append(re.escape(seg))
            literals += 1
        else:
            raise ValueError(f"unsupported path segment {seg!r} in {template!r}")
    return "/".join(parts), literals


def compile_template(template: str) -> Template:
    """Compile a google.api.http path template; ValueError on what it cannot serve."""
    if not template.startswith("/"):
        raise ValueError(f"path template {template!r} must start with '/'")
    path, verb = _split_verb(template)
    regex, variables, openapi, literals = [], [], [], 0
    for token in re.split(r"(\{[^}]*\})", path[1:]):
        if token.startswith("{"):
            name, _, sub = token[1:-1].partition("=")
            if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*", name):
                raise ValueError(f"bad variable {token!r} in {template!r}")
            inner, lit = _segments(sub.split("/"), template) if sub else ("[^/]+", 0)
            literals += lit
            regex.append(f"({inner})")
            variables.append(name)
            openapi.append("{" + name + "}")
        elif token:
            segs = token.split("/")
            # Empty strings around a variable are the slashes next to it.
            inner_regex, lit = [], 0
            for s in segs:
                if s == "":
                    inner_regex.append("")
                else:
                    r, n = _segments([s], template)
                    inner_regex.append(r)
                    lit += n
            literals += lit
            regex.append("/".join(inner_regex))
            openapi.append(token)
    rx = "/" + "".join(regex) + (re.escape(":" + verb) if verb else "")
    oa = "/" + "".join(openapi) + (":" + verb if verb else "")
    return Template(template, re.compile(rx), tuple(variables), oa, literals + (1 if verb else 0))


@dataclasses.dataclass(frozen=True)
class Route:
    """One HTTP binding of one RPC."""

    http_method: str
    template: Template
    body: str
    method: _descriptor.MethodDescriptor

    @property
    def path_fields(self) -> frozenset[str]:
        """Top-level request fields bound by the path (they never come from the query)."""
        return frozenset(v.split(".")[0] for v in self.template.variables)


def _bindings(rule: http_pb2.HttpRule):
    yield rule
    yield from rule.additional_bindings


def routes_for(services: list[_descriptor.ServiceDescriptor]) -> list[Route]:
    """Every HTTP binding of every method, most specific template first."""
    out = []
    for svc in services:
        for m in svc.methods:
            opts = m.GetOptions()
            if not opts.HasExtension(annotations_pb2.http):
                continue
            for rule in _bindings(opts.Extensions[annotations_pb2.http]):
                kind = rule.WhichOneof("pattern")
                if kind == "custom":
                    verb, path = rule.custom.kind.upper(), rule.custom.path
                elif kind in _VERBS:
                    verb, path = kind.upper(), getattr(rule, kind)
                else:
                    raise ValueError(f"{m.full_name} has an http rule without a pattern")
                out.append(Route(verb, compile_template(path), rule.body, m))
    out.sort(key=lambda r: (-r.template.literals, r.template.text))
    return out


def needs_large_body(msg: _descriptor.Descriptor, seen: frozenset = frozenset()) -> bool:
    """True when a message can carry bytes (a bundle), so its route gets the larger body limit."""
    if msg.full_name in seen:
        return False
    for f in msg.fields:
        if f.type == f.TYPE_BYTES:
            return True
        if f.type == f.TYPE_MESSAGE and needs_large_body(f.message_type, seen | {msg.full_name}):
            return True
    return False
