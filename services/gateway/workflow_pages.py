"""The pages of the workflow API: a run's step log (GetWorkflow), a fan-out's children
(ListWorkflowChildren) and the app's runs (ListWorkflows), each behind a page token the
client treats as opaque.

A step token is base64url (unpadded) JSON {"v": 1, "w": <workflow_id>, "p": <position>}:
the run it was made for and the first position of the next page, so a token sent for
another run is refused instead of paging that run from the wrong place. A children token is
{"v": 1, "w": <workflow_id>, "p": <the fan-out's position>, "i": <next child index>}, bound to
its fan-out the same way.

ListWorkflows is ListTasks restricted to the app's workflow types. TaskFilter names one
task_type, so each (shard, workflow type) is its own stream in history's order, asked for a
page at once and merged newest first (listing.merge): the page is exact, never a short page
of runs found among tasks. The token is base64url JSON {"v": 1, "f": <filter hash>, "c":
{"<shard>:<type>": "<cursor>"}}, a stream absent from "c" being exhausted. It costs one
ListTasks per shard and workflow type per page: an app with many workflow types and no
workflow_type filter pays for each (the filter makes it one per shard).
"""

from __future__ import annotations

from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.services.gateway.listing import TOKEN_VERSION, body_of, token_of

DEFAULT_PAGE, MAX_PAGE = 100, 1000
_RESTART = "; start again without it"

Stream = tuple[int, str]  # (shard, workflow type)


def _encode(body: dict) -> str:
    return token_of(body)


def _decode(token: str, field: str) -> dict:
    """The token's JSON body, or INVALID_ARGUMENT naming the field."""
    return body_of(token, InvalidArgument(f"{field} is not valid: pass the previous response's next_{field} "
                                          "unchanged" + _RESTART))


def page_size(value: int, field: str) -> int:
    """0 means the default (100); else 1..1000."""
    if value == 0:
        return DEFAULT_PAGE
    if not 1 <= value <= MAX_PAGE:
        raise InvalidArgument(f"{field} must be 1..{MAX_PAGE}, got {value}")
    return value


def encode_step_token(workflow_id: str, position: int) -> str:
    return _encode({"v": TOKEN_VERSION, "w": workflow_id, "p": position})


def decode_step_token(token: str, workflow_id: str) -> int:
    """The first position of the page a step_page_token names, for this run only."""
    body = _decode(token, "step_page_token")
    position = body.get("p")
    if type(position) is not int or position < 0 or not isinstance(body.get("w"), str):
        raise InvalidArgument("step_page_token is not valid: pass the previous response's next_step_page_token "
                              "unchanged" + _RESTART)
    if body["w"] != workflow_id:
        raise InvalidArgument(f"step_page_token belongs to workflow {body['w'][:40]}, not {workflow_id}: page "
                              f"each run with its own tokens" + _RESTART)
    return position


def encode_list_token(filter_hash: str, cursors: dict[Stream, str]) -> str:
    """The next_page_token for these per-stream cursors ("" when every stream is exhausted)."""
    if not cursors:
        return ""
    return _encode({"v": TOKEN_VERSION, "f": filter_hash,
                    "c": {f"{shard}:{kind}": c for (shard, kind), c in sorted(cursors.items())}})


def decode_list_token(token: str, filter_hash: str, streams: list[Stream]) -> dict[Stream, str]:
    """The per-stream cursors of a page token made for this filter. A stream the token names
    that is no longer listed (its type is no longer a workflow of the active deployment) is
    dropped: its runs are not the app's workflows any more (the module docstring)."""
    body = _decode(token, "page_token")
    bad = InvalidArgument("page_token is not valid: pass the previous response's next_page_token unchanged"
                          + _RESTART)
    if not isinstance(body.get("c"), dict) or not isinstance(body.get("f"), str):
        raise bad
    if body["f"] != filter_hash:
        raise InvalidArgument("page_token does not match the request: keep state and workflow_type as they were "
                              "for the first page" + _RESTART)
    known, shards = set(streams), {s for s, _ in streams}
    out: dict[Stream, str] = {}
    for key, cursor in body["c"].items():
        shard, _, kind = key.partition(":")
        if not shard.isdigit() or not kind or not isinstance(cursor, str) or len(cursor) > 200:
            raise bad
        if shards and int(shard) not in shards:
            raise InvalidArgument(f"page_token names shard {shard}, which this gateway does not serve" + _RESTART)
        if (int(shard), kind) in known:
            out[int(shard), kind] = cursor
    return out


def encode_children_token(workflow_id: str, position: int, index: int) -> str:
    """A ListWorkflowChildren token: the fan-out it pages (run, position) and the next index."""
    return _encode({"v": TOKEN_VERSION, "w": workflow_id, "p": position, "i": index})


def decode_children_token(token: str, workflow_id: str, position: int) -> int:
    """The first child index of the page a token names, for this fan-out only."""
    body = _decode(token, "page_token")
    index, pos = body.get("i"), body.get("p")
    if type(index) is not int or index < 0 or type(pos) is not int or not isinstance(body.get("w"), str):
        raise InvalidArgument("page_token is not valid: pass the previous response's next_page_token unchanged"
                              + _RESTART)
    if (body["w"], pos) != (workflow_id, position):
        raise InvalidArgument(f"page_token belongs to the fan-out at position {pos} of workflow {body['w'][:40]}, "
                              f"not position {position} of {workflow_id}: page each fan-out with its own tokens"
                              + _RESTART)
    return index
