"""policy.resolve shares the result between requests without overrides, per handler object."""

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.gateway import policy


def test_plain_requests_share_one_resolution_per_handler_and_overrides_do_not():
    h = apps_pb2.Handler(name="a", retry=tasks_pb2.RetryPolicy(max_attempts=3))
    r1, t1 = policy.resolve(None, None, h)
    r2, t2 = policy.resolve(None, None, h)
    assert r1 is r2 and t1 is t2 and r1.max_attempts == 3
    # Another handler (a redeploy hands out new objects) resolves anew, even if equal.
    h2 = apps_pb2.Handler(name="a", retry=tasks_pb2.RetryPolicy(max_attempts=4))
    assert policy.resolve(None, None, h2)[0].max_attempts == 4
    # An override is merged every time and never cached.
    o1, _ = policy.resolve(tasks_pb2.RetryPolicy(max_attempts=9), None, h)
    o2, _ = policy.resolve(tasks_pb2.RetryPolicy(max_attempts=8), None, h)
    assert (o1.max_attempts, o2.max_attempts) == (9, 8)
    assert policy.resolve(None, None, h)[0].max_attempts == 3


def test_a_handler_whose_policy_is_inconsistent_is_refused_every_time():
    h = apps_pb2.Handler(name="b", retry=tasks_pb2.RetryPolicy(cap={"seconds": 1}, base={"seconds": 5}))
    for _ in range(2):
        try:
            policy.resolve(None, None, h, where="tasks[0].retry")
        except policy.InvalidArgument as e:
            assert "cap" in e.message
        else:
            raise AssertionError("an inconsistent policy was accepted")
