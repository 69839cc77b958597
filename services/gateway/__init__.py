"""The gateway service: commands on `reminders.v1.<op>` become atomic batches (SPEC §3–§4)."""
