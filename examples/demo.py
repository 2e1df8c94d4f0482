"""The SDK half of `make run`: enqueue a few hello tasks, wait, print what happened.

    python examples/demo.py [--state-dir .ratchet]

Reads the endpoint and API key that `ratchet dev up` wrote, so it needs
nothing else. See README.md for the same steps one at a time.
"""

from __future__ import annotations

import argparse
import json
import sys

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


if __name__ == "__main__":
    sys.exit(main())
