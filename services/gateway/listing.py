"""ListTasks across shards: every shard is asked for a page at once, the pages
are merged newest first by (sort time, task_id), and the page token carries
one cursor per shard.

Sort time is finished_at for terminal tasks, created_at otherwise, the order
each shard pages in (history.proto, ListTasksRequest.cursor). A shard's cursor
only moves past the tasks this page actually returned from it, so across pages
every task is returned exactly once, in order, however the shards interleave.

The token is base64url (unpadded) JSON {"v": 1, "f": <filter hash>, "c":
{"<shard>": "<cursor>"}}: a shard with "" starts from its newest task, a
shard absent from "c" is exhausted. The filter hash binds the token to the
tenant, app and filter it was made for, so a token sent with another filter is
refused instead of silently skipping or repeating tasks.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import heapq
import json

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.services.gateway import filters
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.fanout import each_shard
from ratchet.services.gateway.history_client import HistoryClient

TOKEN_VERSION = 1
MAX_TOKEN_CHARS = 65536
_RESTART = "; start again without page_token"


def encode_token(filter_hash: str, cursors: dict[int, str]) -> str:
    """The next_page_token for these per-shard cursors ("" when every shard is exhausted)."""
    if not cursors:
        return ""
    return token_of({"v": TOKEN_VERSION, "f": filter_hash, "c": {str(s): c for s, c in sorted(cursors.items())}})


def token_of(body: dict) -> str:
    """A page token: body as base64url (unpadded) JSON (the pages of the workflow API use it too)."""
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def body_of(token: str, bad: InvalidArgument) -> dict:
    """The JSON object of a page token of this version; `bad` (raised) if it is not one."""
    if len(token) > MAX_TOKEN_CHARS:
        raise bad
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not isinstance(body, dict) or body.get("v") != TOKEN_VERSION:
        raise bad
    return body


def decode_token(token: str, filter_hash: str, shard_ids: list[int]) -> dict[int, str]:
    """The per-shard cursors of a page token; InvalidArgument if it is not one of ours for this filter."""
    bad = InvalidArgument("page_token is not valid: pass next_page_token from the previous response unchanged"
                          + _RESTART)
    body = body_of(token, bad)
    if not isinstance(body.get("c"), dict) or not isinstance(body.get("f"), str):
        raise bad
    if body["f"] != filter_hash:
        raise InvalidArgument("page_token does not match the filter: keep state, task_type, queue, error_class, "
                              "since and until as they were for the first page" + _RESTART)
    cursors: dict[int, str] = {}
    for key, cursor in body["c"].items():
        if not key.isdigit() or not isinstance(cursor, str) or len(cursor) > 200:
            raise bad
        if int(key) not in shard_ids:
            raise InvalidArgument(f"page_token names shard {key}, which this gateway does not serve" + _RESTART)
        cursors[int(key)] = cursor
    return cursors


def sort_key(t: tasks_pb2.Task) -> tuple[int, int, str]:
    """(seconds, nanos, task_id) of the task's sort time; larger is newer."""
    ts = t.finished_at if t.state in filters.TERMINAL and t.HasField("finished_at") else t.created_at
    return ts.seconds, ts.nanos, t.task_id


def cursor_of(t: tasks_pb2.Task) -> str:
    """The history cursor naming t: "<sort time RFC 3339, microseconds>|<task_id>"."""
    seconds, nanos, task_id = sort_key(t)
    at = dt.datetime.fromtimestamp(seconds, dt.UTC) + dt.timedelta(microseconds=nanos // 1000)
    return f"{at.isoformat(timespec='microseconds').replace('+00:00', 'Z')}|{task_id}"


def merge(pages: dict[int, history_pb2.ListTasksResponse], cursors: dict[int, str],
          page_size: int) -> tuple[list[tasks_pb2.Task], dict[int, str]]:
    """(the page, the next cursor of every shard not exhausted).

    A k-way merge over each shard's own order, so what is taken from a shard is
    always a prefix of its page and its cursor names the last task taken.
    """
    heads = [(_Newest(sort_key(p.tasks[0])), s, 0) for s, p in pages.items() if p.tasks]
    heapq.heapify(heads)
    taken: dict[int, int] = dict.fromkeys(pages, 0)
    out: list[tasks_pb2.Task] = []
    while heads and len(out) < page_size:
        _, s, i = heapq.heappop(heads)
        out.append(pages[s].tasks[i])
        taken[s] = i + 1
        if i + 1 < len(pages[s].tasks):
            heapq.heappush(heads, (_Newest(sort_key(pages[s].tasks[i + 1])), s, i + 1))
    nxt: dict[int, str] = {}
    for s, page in pages.items():
        n = taken[s]
        if n == len(page.tasks) and not page.next_cursor:
            continue  # exhausted
        nxt[s] = cursor_of(page.tasks[n - 1]) if n else cursors[s]
    return out, nxt


class _Newest:
    """A heap key that pops the newest first (heapq is a min-heap)."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, int, str]):
        self.key = key

    def __lt__(self, other: _Newest) -> bool:
        return self.key > other.key


class TaskLister:
    """ListTasks for an authenticated app."""

    def __init__(self, history: HistoryClient, shard_ids: list[int]):
        self.history = history
        self.shard_ids = sorted(shard_ids)

    async def list(self, p: Principal, req: tasks_pb2.ListTasksRequest,
                   timeout: float) -> tasks_pb2.ListTasksResponse:
        """One merged page; UNAVAILABLE naming the shards if any shard does not answer."""
        f = filters.list_filter(req)
        size = filters.page_size(req.page_size)
        fhash = filters.filter_hash(p.tenant_id, p.app_id, f)
        cursors = decode_token(req.page_token, fhash, self.shard_ids) if req.page_token \
            else dict.fromkeys(self.shard_ids, "")
        if not cursors:
            return tasks_pb2.ListTasksResponse()

        async def one(shard: int) -> history_pb2.ListTasksResponse:
            return await self.history.list_tasks(history_pb2.ListTasksRequest(
                shard_id=shard, tenant_id=p.tenant_id, app_id=p.app_id, filter=f, page_size=size,
                cursor=cursors[shard]), timeout)

        pages = await each_shard(sorted(cursors), one)
        tasks, nxt = merge(pages, cursors, size)
        return tasks_pb2.ListTasksResponse(tasks=tasks, next_page_token=encode_token(fhash, nxt))
