"""The import rule: services talk only through generated gRPC clients.

* a service never imports another service;
* libs/ and the SDK never import a service;
* generated code imports only generated code and protobuf/grpc.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if p.is_dir() and not p.name.startswith("__"))


def _imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return names


def _py(folder: pathlib.Path):
    return [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]


def test_services_do_not_import_each_other():
    bad = []
    for svc in SERVICES:
        for path in _py(ROOT / "services" / svc):
            for name in _imports(path):
                if name.startswith("ratchet.services.") and name.split(".")[2] != svc:
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "services must talk through gRPC only:\n" + "\n".join(bad)


def test_libs_and_sdk_do_not_import_services():
    bad = []
    for folder in (ROOT / "libs", ROOT / "sdk"):
        for path in _py(folder):
            for name in _imports(path):
                if name.startswith("ratchet.services"):
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_generated_code_imports_only_contracts():
    allowed = ("ratchet.api", "ratchet.internal", "google.", "grpc", "warnings", "typing", "collections")
    bad = []
    for path in _py(ROOT / "gen"):
        for name in _imports(path):
            if not name.startswith(allowed) and name not in ("google", "grpc"):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_every_service_has_the_standard_shape():
    missing = []
    for svc in SERVICES:
        for part in ("config.py", "server.py", "handlers.py", "errors.py", "__main__.py"):
            if not (ROOT / "services" / svc / part).exists():
                missing.append(f"services/{svc}/{part}")
    assert not missing, "every service has config, server, handlers, errors, __main__: " + ", ".join(missing)
