"""Checks on DispatchService requests. Bad input is refused whole with a
message that says which field is wrong and how to fix it; nothing is sent to
history for a refused request."""

from __future__ import annotations

from collections.abc import Sequence

from ratchet.internal.dispatcher.v1 import dispatcher_pb2 as dpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.breakers import BreakerKey
from ratchet.services.dispatcher.config import MAX_POLL_WAIT_S
from ratchet.services.dispatcher.errors import InvalidArgument
from ratchet.services.dispatcher.polling import PollSpec

MAX_CAPACITY = 1000
MAX_APP_IDS = 100
MAX_ID_CHARS = 200
# An agent heartbeats every lease it holds in one call; capacity per poll is
# at most 1,000 but an agent holds the leases of many polls.
MAX_LEASES = 10_000
MAX_COMPLETIONS = 1000
_OUTCOMES = "SUCCEEDED, FAILED, CANCELED, CRASHED or SUSPENDED"
_STEP_OPS = {wpb.STEP_OP_BEGIN, wpb.STEP_OP_COMMIT}
_FAN_OUT = {wpb.STEP_KIND_PARALLEL, wpb.STEP_KIND_CHILD}
_STEP_KINDS = {wpb.STEP_KIND_STEP, wpb.STEP_KIND_VERSION, wpb.STEP_KIND_SLEEP, wpb.STEP_KIND_WAIT,
               wpb.STEP_KIND_ON_CANCEL, wpb.STEP_KIND_COMPENSATE} | _FAN_OUT
_ON_FAILURE = {wpb.PARALLEL_FAILURE_UNSPECIFIED, wpb.PARALLEL_FAILURE_COLLECT, wpb.PARALLEL_FAILURE_FAIL_FAST}
# History's bound on one fan-out (docs/design/workflows-protocol.md), and on a child's input.
MAX_CHILDREN = 10_000
MAX_CHILD_PAYLOAD_BYTES = 256 * 1024


def poll_spec(request: wpb.PollRequest, default_wait_s: float) -> PollSpec:
    """A PollSpec from a request, or InvalidArgument naming the bad field."""
    _check_id("worker_id", request.worker_id)
    if not 1 <= request.capacity <= MAX_CAPACITY:
        raise InvalidArgument(f"capacity must be 1..{MAX_CAPACITY} free task slots, got {request.capacity}")
    if len(request.app_ids) > MAX_APP_IDS:
        raise InvalidArgument(f"app_ids lists {len(request.app_ids)} apps; at most {MAX_APP_IDS}, "
                             "or none to accept any app")
    for i, app_id in enumerate(request.app_ids):
        _check_id(f"app_ids[{i}]", app_id)
    wait_s = default_wait_s
    if request.HasField("max_wait"):
        wait = request.max_wait
        if wait.seconds < 0 or wait.nanos < 0 or wait.nanos >= 1_000_000_000:
            raise InvalidArgument(f"max_wait must be a non-negative duration, got {wait.seconds}s {wait.nanos}ns")
        wait_s = wait.seconds + wait.nanos / 1e9
        if wait_s > MAX_POLL_WAIT_S:
            raise InvalidArgument(f"max_wait must be at most {MAX_POLL_WAIT_S:g}s, got {wait_s:g}s; "
                                 "poll again instead of waiting longer")
    return PollSpec(request.worker_id, request.capacity, tuple(dict.fromkeys(request.app_ids)), wait_s)


def leases(refs: Sequence[wpb.LeaseRef]) -> None:
    """Refuse a heartbeat whose lease references are malformed."""
    if len(refs) > MAX_LEASES:
        raise InvalidArgument(f"leases lists {len(refs)} leases; send at most {MAX_LEASES} per call")
    for i, ref in enumerate(refs):
        _check_ref(f"leases[{i}]", ref.shard_id, ref.task_id, ref.lease_epoch)


def completions(items: Sequence[wpb.Completion]) -> None:
    """Refuse a completion request with a malformed item."""
    if len(items) > MAX_COMPLETIONS:
        raise InvalidArgument(f"completions lists {len(items)} items; send at most {MAX_COMPLETIONS} per call")
    for i, item in enumerate(items):
        _check_ref(f"completions[{i}]", item.shard_id, item.task_id, item.lease_epoch)
        if item.outcome == wpb.COMPLETION_OUTCOME_UNSPECIFIED:
            raise InvalidArgument(f"completions[{i}].outcome must be set ({_OUTCOMES})")
        if item.outcome == wpb.COMPLETION_OUTCOME_SUSPENDED:
            _check_suspension(f"completions[{i}]", item)


def _check_suspension(name: str, item: wpb.Completion) -> None:
    if item.suspend_position < 0:
        raise InvalidArgument(f"{name}.suspend_position must be >= 0, got {item.suspend_position}; use the "
                              "position of the sleep or wait the run stopped at")
    wake = item.wake_after
    if item.HasField("wake_after") and (wake.seconds < 0 or wake.nanos < 0 or wake.nanos >= 1_000_000_000):
        raise InvalidArgument(f"{name}.wake_after must be a non-negative duration, got {wake.seconds}s "
                              f"{wake.nanos}ns")


def step(request: wpb.StepRequest) -> None:
    """Refuse a step operation that is malformed, before it reaches history. History
    checks what needs the log (positions, names, kinds against it)."""
    if not request.HasField("lease"):
        raise InvalidArgument("lease must be set: the LeaseRef of the run's LeasedTask")
    ref = request.lease
    _check_ref("lease", ref.shard_id, ref.task_id, ref.lease_epoch)
    if request.op not in _STEP_OPS:
        raise InvalidArgument(f"op must be STEP_OP_BEGIN or STEP_OP_COMMIT, got {request.op}")
    if request.kind not in _STEP_KINDS:
        raise InvalidArgument(f"kind must be STEP_KIND_STEP, _VERSION, _SLEEP, _WAIT, _PARALLEL, _CHILD, "
                              f"_ON_CANCEL or _COMPENSATE, got {request.kind}")
    if request.kind == wpb.STEP_KIND_ON_CANCEL and request.op != wpb.STEP_OP_BEGIN:
        raise InvalidArgument("an ON_CANCEL step is only begun (it registers a compensation); its compensation "
                              "runs as a STEP_KIND_COMPENSATE step")
    if request.position < 0:
        raise InvalidArgument(f"position must be >= 0 (the Nth checkpoint call of the run), got {request.position}")
    if not request.name:
        raise InvalidArgument("name must not be empty: the step's name (for a wait, the event's name)")
    _fan_out(request)


def _fan_out(request: wpb.StepRequest) -> None:
    """children and on_failure belong to a fan-out's BEGIN, which needs its children. Handler
    names and inputs are the gateway's to check (StartChildren), against the deployment."""
    if request.kind not in _FAN_OUT:
        if request.children or request.on_failure:
            raise InvalidArgument("children and on_failure are for STEP_KIND_PARALLEL or _CHILD steps only")
        return
    if request.op != wpb.STEP_OP_BEGIN:
        raise InvalidArgument("a PARALLEL or CHILD step is only begun (STEP_OP_BEGIN): its children's ends "
                              "complete it")
    most = 1 if request.kind == wpb.STEP_KIND_CHILD else MAX_CHILDREN
    if not 1 <= len(request.children) <= most:
        raise InvalidArgument(f"children must hold 1..{most} ChildSpecs for this kind, got {len(request.children)}")
    if request.on_failure not in _ON_FAILURE:
        raise InvalidArgument(f"on_failure must be PARALLEL_FAILURE_COLLECT or _FAIL_FAST, got {request.on_failure}")
    for i, child in enumerate(request.children):
        if not child.task_type:
            raise InvalidArgument(f"children[{i}].task_type must name a handler of the app")
        if len(child.payload_json) > MAX_CHILD_PAYLOAD_BYTES:
            raise InvalidArgument(f"children[{i}].payload_json is {len(child.payload_json)} bytes, over the "
                                  f"{MAX_CHILD_PAYLOAD_BYTES}-byte limit")


def breaker_app(request) -> None:
    """Refuse a breaker admin request that does not name its tenant and app."""
    _check_id("tenant_id", request.tenant_id)
    _check_id("app_id", request.app_id)


def breaker_key(request: dpb.ResetBreakerRequest) -> BreakerKey:
    """The breaker a ResetBreaker names, or InvalidArgument."""
    breaker_app(request)
    _check_id("task_type", request.task_type)
    return BreakerKey(request.tenant_id, request.app_id, request.task_type)


def _check_id(name: str, value: str) -> None:
    if not value:
        raise InvalidArgument(f"{name} must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(f"{name} is {len(value)} characters; at most {MAX_ID_CHARS}")


def _check_ref(name: str, shard_id: int, task_id: str, lease_epoch: int) -> None:
    if shard_id < 0:
        raise InvalidArgument(f"{name}.shard_id must be >= 0, got {shard_id}; use the shard_id of the LeasedTask")
    _check_id(f"{name}.task_id", task_id)
    if lease_epoch < 1:
        raise InvalidArgument(f"{name}.lease_epoch must be >= 1, got {lease_epoch}; use the lease_epoch "
                             "of the LeasedTask")
