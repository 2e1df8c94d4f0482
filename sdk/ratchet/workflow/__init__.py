"""Durable workflows: a function whose steps, sleeps and waits are logged by the platform.

    from ratchet import workflow

    @workflow(retries=RetryPolicy(max_attempts=10), timeout="5m")
    def onboard(ctx, input):
        account = ctx.step("create_account", create_account, input["email"])
        if ctx.version("welcome-mail", latest=1) >= 1:
            ctx.step("send_welcome", send_welcome, account["id"])
        ctx.sleep("grace", days=1)
        try:
            decision = ctx.wait_for_event("approved", match={"account": account["id"]}, timeout="7d")
        except TimeoutError:
            return {"account": account["id"], "approved": False}
        return {"account": account["id"], "approved": decision["ok"]}

A run is a task of kind "workflow". Each activation runs the function from the top;
calls that already have an outcome in the run's log answer from it, so a step's
function runs once per run (again only after it failed). A sleep or a wait suspends
the run (no sandbox is held) until its time passes or its event comes.
`ctx.parallel(name, [(handler, input), ...], on_failure="collect"|"fail_fast")` and
`ctx.child(name, handler, input)` run other tasks or workflows of the app as children
and suspend the run until they are done (ChildError in place / ChildFailed raised).
`ctx.on_cancel(fn, *args, name=None, **kwargs)` registers a compensation: if the run is
cancelled, it replays to where it was and runs the registered ones, last first, each
once (a memoized step "compensate:<name>"), then ends CANCELED.
`ratchet.testing.WorkflowEnv` runs workflows in-process on a fake clock.
"""

from __future__ import annotations

from ratchet.workflow.channel import StepChannel
from ratchet.workflow.context import WorkflowContext
from ratchet.workflow.decorator import workflow

# (ratchet.workflow.runner, which runs an activation, is imported by the stub and
# ratchet.testing only: it loads the executor, which `import ratchet` should not.)
__all__ = ["StepChannel", "WorkflowContext", "workflow"]
