"""The `reminders` command line, on top of the services, the replay library and the client."""
