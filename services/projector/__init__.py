"""The projector service: events → session states in the KV bucket `REMINDER_SESSIONS` (§6.3)."""
