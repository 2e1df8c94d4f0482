"""The cron service: stores schedules (database ratchet_cron) and fires each
slot once through the gateway's ControlService.EnqueueScheduled."""
