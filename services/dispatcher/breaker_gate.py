"""The breakers on the hot path: which task types a LeaseTasks call must
leave out (max_tasks 0) or may take one probe of (max_tasks 1).

An in-memory copy of the breakers that are not CLOSED, kept by the breaker
loop (breaker_keeper.py), so a poll never queries the database. With no
breaker open, a call carries no type limits at all.

Probes: the keeper claims a HALF_OPEN breaker's probe in the database (so two
dispatcher processes never both let one through) and hands this process a
token. One LeaseTasks call at a time carries max_tasks 1 for it; if that call
leases a task of the type, that task is the probe (reported to the keeper,
which records it); otherwise the token returns for the next call. A token
not used within the probe timeout lapses here before the database claim does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.clock import Clock
from ratchet.services.dispatcher.breakers import CLOSED, HALF_OPEN, Breaker, BreakerKey, Outcome, is_probe

log = logging.getLogger(__name__)

# History takes at most this many type limits per LeaseTasks (its MAX_BATCH),
# and names of at most MAX_NAME characters; a limit it refused would fail the
# whole lease call, so a completion naming a longer one is never counted.
MAX_LIMITS = 1000
MAX_NAME = 200


@dataclasses.dataclass
class _Token:
    expires: float  # clock.monotonic()
    in_flight: bool = False


def key_of(item: wpb.LeasedTask | wpb.Completion) -> BreakerKey | None:
    """The breaker a leased task or a completion belongs to; None if it does not say."""
    names = (item.tenant_id, item.app_id, item.task_type)
    if not all(names) or any(len(n) > MAX_NAME for n in names):
        return None
    return BreakerKey(item.tenant_id, item.app_id, item.task_type)


class BreakerGate:
    """Type limits for LeaseTasks, and which completions the breakers must hear about."""

    def __init__(self, owner: str, clock: Clock, on_probe_leased: Callable[[BreakerKey, str], None] | None = None):
        self.owner = owner
        self._clock = clock
        self.on_probe_leased = on_probe_leased or (lambda key, task_id: None)
        self._rows: dict[BreakerKey, Breaker] = {}
        self._paused: list[hpb.TaskTypeLimit] = []
        self._tokens: dict[BreakerKey, _Token] = {}
        # Probes this process leased, until the row says so too (the write is queued).
        self._probe_tasks: dict[str, BreakerKey] = {}
        self._capped_warned = False

    # -- the hot path ---------------------------------------------------------------
    def limits(self, app_ids: Sequence[str] = ()) -> tuple[list[hpb.TaskTypeLimit], tuple[BreakerKey, ...]]:
        """Type limits for one LeaseTasks call, and the probe tokens it carries
        (hand them back with settle() or release())."""
        if not self._rows:
            return [], ()
        now = self._clock.monotonic()
        granted = tuple(k for k, t in self._tokens.items()
                        if not t.in_flight and t.expires > now and k in self._rows
                        and (not app_ids or k.app_id in app_ids))
        for key in granted:
            self._tokens[key].in_flight = True
        if not app_ids and not granted:
            return self._paused, ()
        wanted = set(app_ids)
        out = [hpb.TaskTypeLimit(tenant_id=k.tenant_id, app_id=k.app_id, task_type=k.task_type, max_tasks=1)
               for k in granted]
        out.extend(lim for lim in self._paused if (not wanted or lim.app_id in wanted)
                   and BreakerKey(lim.tenant_id, lim.app_id, lim.task_type) not in granted)
        return out[:MAX_LIMITS], granted

    def settle(self, granted: Iterable[BreakerKey], tasks: Sequence[wpb.LeasedTask]) -> None:
        """A call carrying `granted` tokens answered with `tasks`: a task of a
        granted type is its probe; the other tokens return."""
        granted = set(granted)
        if not granted:
            return
        for task in tasks:
            key = key_of(task)
            if key in granted:
                granted.discard(key)
                self._tokens.pop(key, None)
                self._probe_tasks[task.task_id] = key
                log.info("breaker %s/%s/%s: task %s is the probe", key.tenant_id, key.app_id, key.task_type,
                         task.task_id)
                self.on_probe_leased(key, task.task_id)
        self.release(granted)

    def release(self, granted: Iterable[BreakerKey]) -> None:
        """The call carrying these tokens leased no probe (or failed): they return."""
        for key in granted:
            token = self._tokens.get(key)
            if token is not None:
                token.in_flight = False
                self._tidy(key)

    def outcome(self, completion: wpb.Completion) -> Outcome | None:
        """The Outcome the breakers must hear for a completion: every crash, and
        the end of a probe; None for everything else (the common case)."""
        crashed = completion.outcome == wpb.COMPLETION_OUTCOME_CRASHED
        if not crashed and not self._rows:
            return None
        key = key_of(completion)
        if key is None:
            return None
        if not crashed:
            row = self._rows.get(key)
            probe = self._probe_tasks.get(completion.task_id) == key or (row is not None and
                                                                         is_probe(row, completion.task_id))
            if not probe:
                return None
        return Outcome(key, completion.task_id, completion.lease_epoch, crashed,
                       completion.error.error_class, completion.error.message)

    # -- kept by the breaker loop -----------------------------------------------------
    @property
    def breakers(self) -> dict[BreakerKey, Breaker]:
        """The cached breakers that are not CLOSED."""
        return dict(self._rows)

    def has_token(self, key: BreakerKey) -> bool:
        """Whether this process holds a live probe token for `key`."""
        token = self._tokens.get(key)
        return token is not None and token.expires > self._clock.monotonic()

    def grant(self, key: BreakerKey, valid_s: float) -> None:
        """The keeper claimed `key`'s probe for this process, for `valid_s` seconds."""
        self._tokens[key] = _Token(self._clock.monotonic() + valid_s)

    def put(self, b: Breaker) -> None:
        """The breaker as just written or read."""
        current = self._rows.get(b.key)
        if current is not None and current.version > b.version:
            return  # an older read than what we hold
        if b.state == CLOSED:
            self._rows.pop(b.key, None)
        else:
            self._rows[b.key] = b
        self._tidy(b.key)
        self._rebuild()

    def replace(self, rows: Iterable[Breaker]) -> None:
        """Every breaker that is not CLOSED, as just read."""
        self._rows = {b.key: b for b in rows if b.state != CLOSED}
        for key in {*self._tokens, *self._probe_tasks.values()}:
            self._tidy(key)
        self._rebuild()

    def _tidy(self, key: BreakerKey) -> None:
        row = self._rows.get(key)
        half_open = row is not None and row.state == HALF_OPEN
        token = self._tokens.get(key)
        if token is not None and not token.in_flight and not (half_open and row.probe_owner == self.owner
                                                              and row.probe_task_id is None):
            del self._tokens[key]
        for task_id in [t for t, k in self._probe_tasks.items() if k == key]:
            if not half_open or (row.probe_task_id is not None and row.probe_task_id != task_id):
                del self._probe_tasks[task_id]

    def _rebuild(self) -> None:
        paused = [hpb.TaskTypeLimit(tenant_id=k.tenant_id, app_id=k.app_id, task_type=k.task_type, max_tasks=0)
                  for k in sorted(self._rows)]
        if len(paused) > MAX_LIMITS and not self._capped_warned:
            log.warning("%d breakers are open; LeaseTasks carries at most %d type limits, so %d paused types "
                        "may be dispatched", len(paused), MAX_LIMITS, len(paused) - MAX_LIMITS)
            self._capped_warned = True
        self._paused = paused[:MAX_LIMITS]
