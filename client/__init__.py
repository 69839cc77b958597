"""The SDK a host or producer imports: `ReminderClient` and the error it raises."""

from client.sdk import ReminderClient
from contracts.errors import ReminderError

__all__ = ["ReminderClient", "ReminderError"]
