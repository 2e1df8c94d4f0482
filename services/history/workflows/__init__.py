"""Workflow runs on a shard (docs/design/workflows-protocol.md): the fenced step protocol
(steps.py), a SUSPENDED completion and the wake-up (suspend.py), events to one run's inbox or
broadcast to the waits (events.py), and a page of the step log (reads.py); convert.py checks
their requests and shapes their answers. A run is a task: its lease, retries, timeouts and
cancel are the task paths', which learn WAITING and the `wake` timer."""
