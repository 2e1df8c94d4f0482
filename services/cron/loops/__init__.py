"""The cron service's background loops, one per file."""
