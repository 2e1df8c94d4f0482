"""The worker plane has a contract of its own (ratchet.internal.worker.v1): the host agent and
the sandbox side import nothing of history's, and neither the worker contract nor the
dispatcher's imports history's."""

from __future__ import annotations

import ast
import pathlib

from ratchet.internal.dispatcher.v1 import dispatcher_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.internal.worker.v1 import worker_pb2

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _contract_imports(folder: pathlib.Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                if name.startswith("ratchet.internal."):
                    out.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    return out


def test_the_host_agent_and_the_sandbox_import_nothing_of_history_s_contract():
    for folder in (ROOT / "services" / "hostagent", ROOT / "sdk" / "ratchet" / "sandbox"):
        for path, names in _contract_imports(folder).items():
            assert not {n for n in names if n.startswith("ratchet.internal.history")}, (path, names)
    agent = set().union(*_contract_imports(ROOT / "services" / "hostagent").values())
    # The worker plane, the gateway's control reads (deployments, bundles) and its own service.
    assert agent == {"ratchet.internal.worker.v1", "ratchet.internal.gateway.v1", "ratchet.internal.hostagent.v1"}


def test_the_worker_and_dispatcher_contracts_import_nothing_of_history_and_history_imports_the_worker_s():
    def deps(module) -> set[str]:
        return {d.name for d in module.DESCRIPTOR.dependencies}

    assert {d for d in deps(worker_pb2) if d.startswith("ratchet/internal")} == set()
    assert {d for d in deps(dispatcher_pb2) if d.startswith("ratchet/internal")} == set()
    assert "ratchet/internal/worker/v1/worker.proto" in deps(history_pb2)
    # History serves the worker plane's own messages: the dispatcher forwards them as they are.
    lease = history_pb2.LeaseTasksResponse.DESCRIPTOR.fields_by_name["tasks"].message_type
    assert lease is worker_pb2.LeasedTask.DESCRIPTOR
    completions = history_pb2.CompleteTasksRequest.DESCRIPTOR.fields_by_name["completions"].message_type
    assert completions is worker_pb2.Completion.DESCRIPTOR
