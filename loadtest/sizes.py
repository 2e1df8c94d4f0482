"""Cell sizes every system shares, so the same workload means the same work (or the same time)."""

# Batch-enqueue cells run for a time, not a count: 3,000 tasks (sessions 7-9) and then
# 30,000 (session 10) were 30-250 ms of calls at 25k-130k tasks/s, and two runs of the same
# code put the 1,000-per-call ratio at 0.67x and 1.02x. Seconds of calls per cell, and a cap
# on the tasks one cell may leave behind (a system that reaches it is measured over fewer
# seconds; the cell records how many it sent).
BATCH_SECONDS_QUICK = 2.0
BATCH_SECONDS_FULL = 5.0
BATCH_CAP_QUICK = 600_000
BATCH_CAP_FULL = 1_500_000
# Concurrent producers of the batch cells of 100 per call, in both modes: issue 5's grid for
# enqueue capacity (1, 8 and 32 producers, single and batch). Capacity is the best of them, as
# for single calls. Until session 14 one cell of 4 producers stood for the grid. Calls of 1,000
# run once, from 2 producers (round 1).
BATCH_PRODUCERS = (1, 8, 32)

# Idle schedule-to-start samples. p99 by nearest rank is the slowest sample below
# 100 samples (with 60, one slow sample in a noisy hour decided the bar's verdict);
# 200 puts it at the third slowest. Peers take fewer: DBOS's 1 s poll makes each of
# its samples ~1 s.
S2S_SAMPLES_QUICK = 200
S2S_SAMPLES_FULL = 500
PEER_S2S_SAMPLES_QUICK = 100
PEER_S2S_SAMPLES_FULL = 200

# Open-loop (ack latency) cells in quick mode. Their p99 decides a bar, and a p99 over a few
# seconds is one event's: at 75 % of capacity an 8 s cell holds ~30k calls, so a single 100 ms
# stall of the machine (a checkpoint's writes, an autovacuum, a descheduled process on 2 cores)
# holds up ~1.2 % of them and is the p99 by itself (session 13: p99 56.6 ms with p90 14.8 ms
# and p999 109 ms). 20 s brings one such stall under 0.5 %; the full run's cells are 23 s.
ACK_SECONDS_QUICK = 20.0
