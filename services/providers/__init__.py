"""The providers service: runtime events become reminders, every evaluation in the log (SPEC §9)."""
