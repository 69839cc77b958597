"""Wire contracts of Reminder Ledger: pydantic models for specs, commands, events and state.

This package is data only. It depends on nothing of the project; the pure core, the services
and the replay tool all import it, so every process reads and writes the same shapes.
"""
