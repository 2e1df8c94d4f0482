"""Ratchet SDK: durable background tasks; the platform runs your code.

    from ratchet import task, workflow, RetryPolicy, RetryableError, FatalError, Client

    @task(retries=RetryPolicy(max_attempts=5, base="1s", cap="1h"), timeout="10m")
    def resize_image(ctx, payload):
        ...

    @workflow
    def onboard(ctx, input):
        account = ctx.step("create_account", create_account, input)
        ctx.sleep("grace", days=1)
        ...

    client = Client("127.0.0.1:7233", api_key)
    task_id = client.enqueue("resize_image", {"url": "..."})
    print(client.wait(task_id).result)

The handler side (`task`, `workflow`, `RetryPolicy`, the errors) is imported eagerly and is
pure Python. `Client` is imported on first use, so code running in a sandbox
does not pay for gRPC just by importing `ratchet`.
"""

from __future__ import annotations

import importlib

# The handler-side names live in modules of the same name (`ratchet.task.task`),
# so they are bound here after the submodule import: the package attribute
# `task` is then the decorator, not the module.
_HANDLER_SIDE = {
    "task": "ratchet.task",
    "RetryPolicy": "ratchet.retry",
    "RetryableError": "ratchet.errors",
    "FatalError": "ratchet.errors",
    "TaskContext": "ratchet.context",
    "workflow": "ratchet.workflow",
    "WorkflowContext": "ratchet.workflow",
    "StepFailed": "ratchet.errors",
    "WorkflowVersionError": "ratchet.errors",
    "ChildError": "ratchet.errors",
    "ChildFailed": "ratchet.errors",
}
_LAZY = {
    "Client": "ratchet.client",
    "AsyncClient": "ratchet.aio",
    "TaskInfo": "ratchet.client",
}

__all__ = ["AsyncClient", "ChildError", "ChildFailed", "Client", "FatalError", "RetryPolicy", "RetryableError",
           "StepFailed", "TaskContext", "TaskInfo", "WorkflowContext", "WorkflowVersionError", "task", "workflow"]


def _bind(name: str, module: str) -> object:
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


# Defined before the eager imports below so that handler-side modules may
# themselves write `from ratchet import RetryPolicy` while we initialise.
def __getattr__(name: str) -> object:
    module = _LAZY.get(name) or _HANDLER_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module 'ratchet' has no attribute {name!r}")
    return _bind(name, module)


for _name, _module in _HANDLER_SIDE.items():
    try:
        _bind(_name, _module)
    except ModuleNotFoundError as _e:
        # Only tolerate the module itself being absent (a partial checkout);
        # a broken import inside an existing module must surface.
        if _e.name != _module:
            raise
del _name, _module
