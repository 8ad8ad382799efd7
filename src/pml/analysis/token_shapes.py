"""Credentials known by their shape: token formats whose text alone says it is a secret.

``CREDENTIAL_SHAPES`` matches a whole credential (``ghp_...``, ``sk-...``, ``AKIA...``, a
JWT, a Hugging Face or Shopify token...): stored code lifts it, the audit and stored intents
redact it. ``TOKEN_PREFIX`` matches a constant that is only the start of one (``"ghp_"``),
which code may glue to the rest at run time. ``command_line_spans`` finds the passwords of
command lines (``mysql -pSecret``, ``sshpass -p secret``, ``curl -u user:secret``,
``sqlcmd -U sa -P secret``).

Every pattern starts with a fixed prefix behind a look-behind and bounds its runs, so each
runs in linear time on hostile input.

Example::

    >>> bool(CREDENTIAL_SHAPES.search("token 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"))
    True
    >>> bool(TOKEN_PREFIX.fullmatch("ghp_"))
    True
    >>> text = "mysql -h db -uroot -pSummer2025 app"
    >>> [text[a:b] for a, b in command_line_spans(text)]
    ['Summer2025']
"""

from __future__ import annotations

import re
from typing import Final

_START = r"(?<![A-Za-z0-9])"

# (prefix, rest): the prefix alone is what TOKEN_PREFIX knows.
_SHAPES: Final = [
    (r"sk-", r"[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic
    (r"(?:sk|rk|pk)_(?:live|test)_", r"[A-Za-z0-9]{16,}"),  # Stripe
    (r"gh[pousr]_", r"[A-Za-z0-9]{20,}"),  # GitHub
    (r"github_pat_", r"[A-Za-z0-9_]{20,}"),
    (r"gl(?:pat|ptt|dt|rt|cbt|soat|ffct|imt|oas)-", r"[A-Za-z0-9_\-]{20,}"),  # GitLab
    (r"xox[abprse]-", r"[A-Za-z0-9\-]{10,}"),  # Slack
    (r"xapp-", r"[0-9]-[A-Za-z0-9\-]{10,}"),
    (r"(?:AKIA|ASIA)", r"[0-9A-Z]{16}(?![0-9A-Z])"),  # AWS access key id
    (r"AIza", r"[0-9A-Za-z_\-]{35}"),  # Google
    (r"npm_", r"[A-Za-z0-9]{36}"),
    (r"pypi-", r"AgE[A-Za-z0-9_\-]{50,}"),
    (r"hf_", r"[A-Za-z0-9]{30,}"),  # Hugging Face
    (r"shp(?:at|ss|ca|pa)_", r"[A-Fa-f0-9]{32}"),  # Shopify
    (r"dapi", r"[a-f0-9]{32}(?:-[0-9]{1,3})?"),  # Databricks
    (r"PMAK-", r"[A-Za-z0-9]{20,}-[A-Za-z0-9]{20,}"),  # Postman
    (r"HRKU-", r"[A-Za-z0-9_\-]{20,}"),  # Heroku
    (r"AGE-SECRET-KEY-1", r"[0-9A-Z]{50,}"),  # age
    (r"do[por]_v1_", r"[a-f0-9]{64}"),  # DigitalOcean
    (r"SG\.", r"[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"),  # SendGrid
    (r"sq0(?:atp|csp)-", r"[A-Za-z0-9_\-]{22,}"),  # Square
    (r"lin_api_", r"[A-Za-z0-9]{32,}"),  # Linear
    (r"ATATT", r"[A-Za-z0-9_\-=]{20,}"),  # Atlassian
    (r"figd_", r"[A-Za-z0-9_\-]{20,}"),  # Figma
    (r"(?:ntn|secret)_", r"[A-Za-z0-9]{40,}"),  # Notion
    (r"key-", r"[0-9a-zA-Z]{32}(?![A-Za-z0-9])"),  # Mailgun
]
_JWT: Final = r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}(?:\.[A-Za-z0-9_\-]*)?"
# A Telegram bot token (``123456789:AA...``), a Discord bot token (three dotted parts), and
# the webhook URLs whose last part is the credential (Slack, Discord).
_OTHERS: Final = [
    r"[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])",
    r"[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}",
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_]{1,32}/[A-Za-z0-9_]{1,32}"
    r"/[A-Za-z0-9_]{16,64}",
    r"discord(?:app)?\.com/api/webhooks/[0-9]{5,24}/[A-Za-z0-9_\-]{40,100}",
]

# One look-behind before one alternation: ten times faster than one per alternative.
CREDENTIAL_SHAPES: Final = re.compile(
    _START + "(?:" + "|".join([*(prefix + rest for prefix, rest in _SHAPES), _JWT, *_OTHERS]) + ")"
)
# A constant that is only a credential's known start, to be glued to the rest at run time.
TOKEN_PREFIX: Final = re.compile("|".join([*(prefix for prefix, _ in _SHAPES), "eyJ"]))

# Command lines: the password after mysql's -p, sshpass's -p, docker login's -p, curl's
# -u user:password, SQL Server's sqlcmd/bcp -P.
_COMMAND_LINE: Final = re.compile(
    r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n]{0,200}?[ \t]-p([^\s'\"]{3,256})"
    r"|\bsshpass[ \t]+-p[ \t]*([^\s'\"]{3,256})"
    r"|\b(?:docker|podman|helm|nerdctl)[ \t]+(?:registry[ \t]+)?login\b"
    r"[^\n]{0,200}?[ \t]-p[ \t]+([^\s'\"]{3,256})"
    r"|(?:^|[ \t])(?:-u|--user)[ \t]+['\"]?[^\s:'\"]{1,64}:([^\s'\"@]{3,256})"
    r"|\b(?:sqlcmd|bcp|osql|isql)\b[^\n]{0,200}?[ \t]-P[ \t]*([^\s'\"]{3,256})"
)


def command_line_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of the passwords written in command lines inside ``text``."""
    spans: list[tuple[int, int]] = []
    for match in _COMMAND_LINE.finditer(text):
        group = next(index for index in (1, 2, 3, 4, 5) if match[index] is not None)
        value = match[group]
        if value[0] in "$%{<" or (group == 4 and not any(c.isalpha() for c in value)):
            continue  # a variable, or ``-u 1000:1000`` (a uid:gid)
        spans.append(match.span(group))
    return spans
