"""The one exception type the engine raises for bad input: it names the field and says what to change."""
from __future__ import annotations


class InputError(ValueError):
    """Input the engine cannot compute with. `field` names the offending input; str() is one clear line."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
