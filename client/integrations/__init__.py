"""Drop-in adapters for agent runtimes, each a thin layer over `ReminderClient` with no rule
of its own (docs/integrations.md): `pydantic_ai`, `langchain`, `openai_agents`, and the
`reminders hook claude-code` command (`claude_code`). Each runtime's package is an extra."""
