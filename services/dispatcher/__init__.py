"""The shard dispatcher: hands leases to host agents (pull, long poll), takes
their heartbeats and completions (the worker plane, worker.proto), and fires
each owned shard's timers.

It owns no task table. It owns decisions (which shard to ask, the per-shard
tenant cursor, when to fire timers, who of the parked polls goes next) and
carries them out through the history service's batch RPCs. Its own database
(ratchet_dispatch) holds one thing: the circuit breakers per task type,
which decide which types a LeaseTasks call leaves out.
"""
