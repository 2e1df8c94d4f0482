"""Named SQL queries loaded from .sql files.

A file holds blocks introduced by `-- name: entity_verb`; the text up to the
next block is the query. Queries are loaded once at import and referenced by
name, so the same name identifies the SQL, its wrapper and its fault hook.
"""

from __future__ import annotations

import pathlib
import re

_NAME = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


class Queries(dict):
    """name -> SQL text. Missing names raise KeyError naming the file."""

    def __init__(self, path: pathlib.Path):
        super().__init__()
        self.path = path
        text = path.read_text()
        matches = list(_NAME.finditer(text))
        if not matches:
            raise ValueError(f"{path} has no '-- name:' blocks")
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            body = text[m.end():end].strip()
            name = m.group(1)
            if name in self:
                raise ValueError(f"{path}: query {name!r} defined twice")
            self[name] = body.rstrip(";")

    def __missing__(self, key: str) -> str:
        raise KeyError(f"no query named {key!r} in {self.path}")


def load_queries(*paths: pathlib.Path) -> Queries:
    """Load and merge several .sql files (names must not repeat)."""
    merged: Queries | None = None
    for p in paths:
        q = Queries(p)
        if merged is None:
            merged = q
        else:
            for k, v in q.items():
                if k in merged:
                    raise ValueError(f"query {k!r} defined in {merged.path} and {p}")
                merged[k] = v
    if merged is None:
        raise ValueError("no query files given")
    return merged
