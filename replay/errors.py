"""The one error type of the replay tool: a readable line, never a traceback."""


class ReplayError(Exception):
    """Replay or export could not proceed; `str(error)` is the whole story, in one line."""
