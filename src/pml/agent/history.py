"""The conversation ``pml agent`` keeps between turns, within a token budget.

    history = History(budget_tokens=6000)
    history.add("what time is it in Tokyo", "It is 21:04 in Tokyo.")
    history.messages()       # [{"role": "user", ...}, {"role": "assistant", ...}]

Only what the person said and what the executor answered are kept (tool calls and results
stay inside their turn). Tokens are estimated (about four characters a token, plus a few per
message), which needs no tokenizer; the oldest exchanges go first, and one exchange larger
than the whole budget is kept cut to it, so the last turn is never lost entirely.
"""

from __future__ import annotations

from collections import deque
from typing import Final

CHARS_PER_TOKEN: Final = 4
MESSAGE_OVERHEAD_TOKENS: Final = 4


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of ``text``'s tokens."""
    return -(-len(text) // CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


class History:
    """User and assistant exchanges, oldest dropped first beyond ``budget_tokens``."""

    def __init__(self, budget_tokens: int) -> None:
        self._budget = max(1, budget_tokens)
        self._exchanges: deque[tuple[str, str]] = deque()
        self._tokens = 0

    @property
    def tokens(self) -> int:
        return self._tokens

    def add(self, user: str, assistant: str) -> None:
        """Keep one exchange, dropping the oldest ones until the budget holds."""
        half = self._budget * CHARS_PER_TOKEN // 2
        if estimate_tokens(user) + estimate_tokens(assistant) > self._budget:
            user, assistant = user[:half], assistant[:half]
        self._exchanges.append((user, assistant))
        self._tokens += _cost(user, assistant)
        while self._tokens > self._budget and len(self._exchanges) > 1:
            self._tokens -= _cost(*self._exchanges.popleft())

    def messages(self) -> list[dict[str, str]]:
        """The kept exchanges as chat messages, oldest first."""
        out: list[dict[str, str]] = []
        for user, assistant in self._exchanges:
            out.append({"role": "user", "content": user})
            out.append({"role": "assistant", "content": assistant})
        return out

    def clear(self) -> None:
        self._exchanges.clear()
        self._tokens = 0


def _cost(user: str, assistant: str) -> int:
    return estimate_tokens(user) + estimate_tokens(assistant)
