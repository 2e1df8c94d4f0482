"""Client calls for searching tasks (dead letters) and bulk operations.

Mixed into ratchet.Client; uses its transport (`_t`) and TaskService stub (`_tasks`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

from ratchet._transport import invalid, new_request_id
from ratchet._wire import moment, operation_info, task_filter, task_info, task_state
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.models import BulkResult, OperationInfo, TaskInfo, TaskPage


def _absolute(value: Any, what: str) -> Any:
    # A relative bound ("2h") must resolve once: every page of one search needs the same filter.
    if value is None:
        return None
    return moment(value, what).ToDatetime(tzinfo=dt.UTC)


class TaskSearchCalls:
    """list_tasks / iter_tasks, retry_tasks / cancel_tasks and their operations."""

    _t: Any
    _tasks: Any

    def list_tasks(self, *, state: str | None = None, task_type: str | None = None, queue: str | None = None,
                   error_class: str | None = None, since: Any = None, until: Any = None,
                   page_size: int | None = None, page_token: str | None = None) -> TaskPage:
        """One page of the app's tasks matching the filter, newest first.

        FAILED is the dead-letter state: `list_tasks(state="FAILED",
        error_class="KeyError", since="1d")`. since/until: a datetime, epoch
        seconds, ISO 8601, or a time ago ("2h", a timedelta); they bound
        finished_at for terminal states, created_at otherwise. Pass the
        page's next_page_token back with the same filter (absolute times) for
        the next page; iter_tasks does that for you.
        """
        if state is not None and not isinstance(state, str):
            raise invalid("list_tasks takes a single state name, e.g. state='FAILED'")
        req = tasks_pb2.ListTasksRequest(task_type=task_type or "", queue=queue or "", error_class=error_class or "",
                                         page_size=page_size or 0, page_token=page_token or "")
        if state is not None:
            req.state = task_state(state)
        if since is not None:
            req.since.CopyFrom(moment(since, "since"))
        if until is not None:
            req.until.CopyFrom(moment(until, "until"))
        resp = self._t.call(self._tasks.ListTasks, req)
        return TaskPage([task_info(t) for t in resp.tasks], resp.next_page_token or None)

    def iter_tasks(self, *, state: str | None = None, task_type: str | None = None, queue: str | None = None,
                   error_class: str | None = None, since: Any = None, until: Any = None,
                   page_size: int | None = None) -> Iterator[TaskInfo]:
        """Every task matching the filter (as list_tasks), following the pages."""
        filt = dict(state=state, task_type=task_type, queue=queue, error_class=error_class,
                    since=_absolute(since, "since"), until=_absolute(until, "until"), page_size=page_size)
        token = None
        while True:
            page = self.list_tasks(**filt, page_token=token)
            yield from page.tasks
            if not page.next_page_token:
                return
            token = page.next_page_token

    def retry_tasks(self, *, state: Any = None, task_type: str | None = None, queue: str | None = None,
                    error_class: str | None = None, since: Any = None, until: Any = None, dry_run: bool = False,
                    request_id: str | None = None) -> BulkResult:
        """Retry every terminal task matching the filter (default state FAILED)
        as a new task, in a durable background operation.

        dry_run only counts. Returns the count and (unless dry_run) the
        operation; follow it with wait_operation. The request id (minted when
        not given) is resent on transport retries, so a lost answer never
        starts a second operation.
        """
        req = tasks_pb2.RetryTasksRequest(
            filter=task_filter(state, task_type, queue, error_class, since, until), dry_run=dry_run,
            request_id=request_id or new_request_id())
        return self._bulk_result(self._t.call(self._tasks.RetryTasks, req))

    def cancel_tasks(self, *, state: Any = None, task_type: str | None = None, queue: str | None = None,
                     error_class: str | None = None, since: Any = None, until: Any = None, dry_run: bool = False,
                     request_id: str | None = None) -> BulkResult:
        """Cancel every non-terminal task matching the filter (default: ENQUEUED,
        LEASED and RETRY_WAIT), as retry_tasks does."""
        req = tasks_pb2.CancelTasksRequest(
            filter=task_filter(state, task_type, queue, error_class, since, until), dry_run=dry_run,
            request_id=request_id or new_request_id())
        return self._bulk_result(self._t.call(self._tasks.CancelTasks, req))

    @staticmethod
    def _bulk_result(resp: Any) -> BulkResult:
        return BulkResult(resp.matched, operation_info(resp.operation) if resp.HasField("operation") else None)

    def get_operation(self, operation_id: str) -> OperationInfo:
        """A bulk operation's state, progress and per-item failures."""
        resp = self._t.call(self._tasks.GetBulkOperation,
                            tasks_pb2.GetBulkOperationRequest(operation_id=operation_id))
        return operation_info(resp.operation)

    def cancel_operation(self, operation_id: str) -> OperationInfo:
        """Stop a running bulk operation (items already processed stay processed)."""
        resp = self._t.call(self._tasks.CancelBulkOperation,
                            tasks_pb2.CancelBulkOperationRequest(operation_id=operation_id))
        return operation_info(resp.operation)

    def wait_operation(self, operation_id: str, timeout: float = 300.0, *,
                       max_interval: float = 2.0) -> OperationInfo:
        """Poll until the operation is no longer RUNNING; TimeoutError after timeout seconds."""
        deadline = time.monotonic() + timeout
        interval = 0.1
        while True:
            op = self.get_operation(operation_id)
            if op.done:
                return op
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"operation {operation_id} is still RUNNING after {timeout:g}s "
                                   f"({op.processed} of {op.matched} processed)")
            time.sleep(min(interval, left))
            interval = min(interval * 1.5, max_interval)
