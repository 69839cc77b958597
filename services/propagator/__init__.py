"""The propagator service: `handed_off` on a parent → inherited reminders in the child (§4.9)."""
