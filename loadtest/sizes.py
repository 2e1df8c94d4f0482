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

# Idle schedule-to-start samples. p99 by nearest rank is the slowest sample below
# 100 samples (with 60, one slow sample in a noisy hour decided the bar's verdict);
# 200 puts it at the third slowest. Peers take fewer: DBOS's 1 s poll makes each of
# its samples ~1 s.
S2S_SAMPLES_QUICK = 200
S2S_SAMPLES_FULL = 500
PEER_S2S_SAMPLES_QUICK = 100
PEER_S2S_SAMPLES_FULL = 200
