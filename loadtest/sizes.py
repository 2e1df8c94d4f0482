"""Cell sizes every system shares, so the same workload means the same amount of work."""

# Tasks per batch-enqueue cell. 3,000 (sessions 7-9) was 30-120 ms of calls at
# 25k-100k tasks/s: a cell that short measured start-up and scheduling jitter,
# not a rate.
BATCH_TOTAL_QUICK = 30_000
BATCH_TOTAL_FULL = 100_000

# Idle schedule-to-start samples. p99 by nearest rank is the slowest sample below
# 100 samples (with 60, one slow sample in a noisy hour decided the bar's verdict);
# 200 puts it at the third slowest. Peers take fewer: DBOS's 1 s poll makes each of
# its samples ~1 s.
S2S_SAMPLES_QUICK = 200
S2S_SAMPLES_FULL = 500
PEER_S2S_SAMPLES_QUICK = 100
PEER_S2S_SAMPLES_FULL = 200
