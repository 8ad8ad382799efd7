"""Logging of a serving process: ``[log]`` format and levels, access and slow-call lines."""

from __future__ import annotations

from pml.sections_ops import LogSettings


def configure(settings: LogSettings) -> None:
    """Apply ``[log]`` to the root logger (format, level, per-logger levels)."""
    del settings
