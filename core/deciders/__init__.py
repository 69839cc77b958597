"""The deciders of SPEC §4, one plain function per command, grouped by theme.

A decider takes `(batch, command, config)`, emits draft events into the `Batch` and returns
the reply (its `session_seq` is filled in by `Batch.finish`); a rejection raises
`ReminderError` and appends nothing. `core.decide.DECIDERS` maps each command to its decider,
so a new command is a new function in the module of its theme plus one line in that table:

- `common`: the checks and the inject path several deciders share;
- `reminders`: what a caller does to reminders (inject, clear, checkpoint, revoke);
- `render`: the envelope of a turn;
- `turns`: the turn boundaries (end_turn, compact);
- `handoff`: reminders crossing to a sub-agent (handoff, inherit);
- `evaluate`: the providers' evaluations.
"""
