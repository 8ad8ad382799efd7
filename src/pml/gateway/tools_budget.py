"""How many tokens a ``tools/list`` entry costs an agent, estimated without a tokenizer.

    estimate_tokens('{"name":"mcp__fs__read_json",...}')   # >= cl100k's count, as a rule

``[gateway] capability_tools_budget`` caps the capability tools listed (SPEC §6.6). The
real tokenizers (OpenAI's cl100k and its kin) are not a runtime dependency, so the gateway
counts the compact JSON it sends with a conservative model of a BPE tokenizer: the text is
split as cl100k's pre-tokenizer splits it (words, numbers of up to three digits, runs of
punctuation, spaces); an ASCII word costs one token per ``WORD_BYTES`` letters and one
more at each camelCase hump, a number one token, punctuation one per ``PUNCT_BYTES``
characters, and characters beyond ASCII a weight by script (Cyrillic shares tokens, a
Greek, Hebrew or accented letter, a CJK character or a kana is about one, an emoji three).

Checked against cl100k (``tests/gateway/test_tools_budget_estimate.py``,
``benchmarks/context.py``): on tool definitions of the reference servers, synthetic SaaS
catalogs, English, code, ids, CJK, Cyrillic, Greek, Hebrew, Arabic and accented text it
counts at most about 3 % fewer tokens for a single tool, never fewer for a whole listing,
and about 20 % more on the median. Adversarial character soup (random mixed-case letters
and digits) can be undercounted by up to about a quarter: the budget bounds an agent's
context, it is not a security limit.
"""

from __future__ import annotations

import math
import re
from typing import Final

WORD_BYTES: Final = 7
PUNCT_BYTES: Final = 3
_PIECE: Final = re.compile(r"[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?(?:[^\s\w]|_)+[\r\n]*|\s+")
_HUMP: Final = re.compile(r"[a-z][A-Z]")


def _wide_weight(char: str) -> float:
    """Tokens of one character in a piece that is not all ASCII."""
    code = ord(char)
    if code < 0x80:
        return 1.0 if code < 0x20 or code == 0x7F else 0.25
    if 0x400 <= code < 0x530:
        return 0.5  # Cyrillic, which cl100k merges well
    if code < 0x800:
        return 1.0  # other 2-byte scripts: Latin accents, Greek, Hebrew, Arabic
    if code < 0x10000:
        return 1.1  # CJK, kana, symbols
    return 3.0  # emoji and other astral characters


def _piece_tokens(piece: str) -> float:
    if not piece.isascii():
        return math.ceil(sum(_wide_weight(char) for char in piece))
    if piece[-1].isalpha():
        return 1 + (len(piece) - 1) // WORD_BYTES + len(_HUMP.findall(piece))
    if piece[0].isdigit() or piece.isspace():
        return 1
    controls = sum(1 for char in piece if ord(char) < 0x20 or ord(char) == 0x7F)
    return 1 + (len(piece) - 1) // PUNCT_BYTES + controls


def estimate_tokens(text: str) -> int:
    """A conservative estimate of the tokens of ``text`` (see module)."""
    return int(sum(_piece_tokens(match.group()) for match in _PIECE.finditer(text)))


# The smallest capability tool there can be: no listing of ``budget`` tokens holds more
# than ``budget // MIN_TOOL_TOKENS`` of them.
MIN_TOOL_TOKENS: Final = estimate_tokens(
    '{"name":"mcp__a__b","description":"Learned capability a:b.",'
    '"inputSchema":{"type":"object","properties":{}}}'
)
