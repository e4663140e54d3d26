"""The one user-facing error type of the node.

Every failure a user can act on is raised as :class:`NodeError` with a message that says what happened and a
``hint`` that says how to fix it. The CLI prints both; the GUI shows both.
"""

from __future__ import annotations


class NodeError(Exception):
    """A failure the user can understand and act on."""

    def __init__(self, message: str, *, hint: str = "", code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message
