"""The shard dispatcher: hands leases to host agents (pull, long poll) and takes
their heartbeats and completions (the worker plane, worker.proto).

It owns no task table. It owns decisions (which shard to ask, the per-shard
tenant cursor, who of the parked polls goes next) and carries them out
through the history service's batch RPCs; history fires the timers. Its own
database (ratchet_dispatch) holds one thing: the circuit breakers per task
type, which decide which types a LeaseTasks call leaves out.
"""
