"""What the SQL front end says when a statement cannot run: one line, with the line and column where it can
point at one."""

from __future__ import annotations


class SqlError(ValueError):
    """A statement that cannot run as written: nothing was started or changed."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message, self.line, self.column = message, line, column
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        return f"line {self.line}, column {self.column}: {self.message}"
