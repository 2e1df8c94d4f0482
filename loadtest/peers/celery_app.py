"""Celery peer: the app and its no-op task. The worker is Celery's own CLI
(`python -m celery -A loadtest.peers.celery_app worker ...`, see CeleryPeer);
the broker URL comes from RATCHET_BENCH_BROKER."""

from __future__ import annotations

import os

from celery import Celery

from loadtest.peers import probe


def noop(payload: dict) -> None:
    """The workload: nothing, unless the bench asked for a probe or a sleep."""
    probe.record(payload)


def make_app(broker: str) -> Celery:
    """A Celery app on `broker` with the bench's configuration and the no-op task."""
    app = Celery("ratchet_bench", broker=broker)
    app.conf.update(
        # Late acks: a task leaves Redis only once it ran, so a killed worker's tasks are
        # redelivered (after the visibility timeout) and the bench can count unfinished ones.
        task_acks_late=True,
        task_ignore_result=True,
        task_default_queue="bench",
        worker_prefetch_multiplier=4,
        broker_transport_options={"visibility_timeout": 3600},
        worker_hijack_root_logger=False,
    )
    app.task(name="noop")(noop)
    return app


# The worker's app (`celery -A loadtest.peers.celery_app worker`).
app = make_app(os.environ.get("RATCHET_BENCH_BROKER", "redis://127.0.0.1:6379/0"))
