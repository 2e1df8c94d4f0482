"""The SDK half of `make run`: enqueue a few hello tasks, wait, print what happened.

    python examples/demo.py [--state-dir .ratchet]

Reads the endpoint and API key that `ratchet dev up` wrote, so it needs
nothing else. See README.md for the same steps one at a time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ratchet import Client
from ratchet.client import RatchetError


def show(label: str, info) -> None:
    if info.state == "SUCCEEDED":
        detail = info.result
    else:
        detail = info.error and f"{info.error.error_class}: {info.error.message}"
    attempts = ", ".join(f"#{a.attempt} {a.outcome}" for a in info.attempts) or "none"
    print(f"  {label:<34} {info.state:<10} {json.dumps(detail)}   attempts: {attempts}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", default=".ratchet")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    try:
        with Client.from_state_dir(args.state_dir) as client:
            run(client, args.timeout)
            run_workflow(client, args.timeout)
    except (RatchetError, TimeoutError, ValueError) as e:
        print(f"demo failed: {e}", file=sys.stderr)
        return 1
    return 0


def run(client: Client, timeout: float) -> None:
    print("Enqueueing over the Python SDK:")
    jobs = {
        'greet {"name": "Ada"}': client.enqueue("greet", {"name": "Ada"}),
        'add {"numbers": [1, 2, 3]}': client.enqueue("add", {"numbers": [1, 2, 3]}),
        "flaky (fails once, then works)": client.enqueue("flaky"),
        'add {"numbers": "oops"} (fatal)': client.enqueue("add", {"numbers": "oops"}),
    }
    batch = client.enqueue_batch([{"task_type": "greet", "payload": {"name": n}} for n in ("Grace", "Linus")])
    jobs.update({f"greet (batch item {i + 1})": tid for i, tid in enumerate(batch)})
    later = client.enqueue("greet", {"name": "later"}, delay="1h")
    print(f"  enqueued {len(jobs) + 1} tasks; waiting for them to finish...")
    for label, task_id in jobs.items():
        show(label, client.wait(task_id, timeout=timeout))
    print(f"  greet delayed by 1h, then cancelled   {client.cancel(later)}")
    info = client.get(jobs["flaky (fails once, then works)"])
    print(f"\n`ratchet tasks get {info.task_id}` shows the whole record, e.g. the flaky task's attempts:")
    for a in info.attempts:
        err = f" ({a.error.error_class}: {a.error.message})" if a.error else ""
        print(f"  attempt {a.attempt} on {a.worker_id}: {a.outcome}{err}")


def run_workflow(client: Client, timeout: float) -> None:
    print("\nStarting the signup workflow (a step, a 1 s durable sleep, a wait for an event):")
    wid = client.start_workflow("signup", {"name": "Ada"})
    run = poll(client, wid, timeout, lambda r: r.state == "WAITING" and r.pending and r.pending.name == "approved")
    print(f"  {wid} is {run.state}, waiting for event {run.pending.name!r} matching {run.pending.match}")
    client.send_workflow_event(wid, "approved", {"name": "Ada", "by": "ops"})
    run = poll(client, wid, timeout, lambda r: r.terminal)
    print(f"  sent it; the run is {run.state} after {run.activations} activations: {json.dumps(run.result)}")
    for step in run.steps:
        print(f"    step {step.position} {step.kind.lower():<5} {step.name:<15} {step.state}")
    print(f"`ratchet workflows get {wid}` shows the same.")


def poll(client: Client, wid: str, timeout: float, done):
    """The run once done(run) holds; TimeoutError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        run = client.get_workflow(wid)
        if done(run):
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"workflow {wid} is still {run.state} after {timeout:.0f}s")
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
