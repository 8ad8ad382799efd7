"""PML, the Procedural Memory Layer: an MCP gateway that learns capabilities.

The public Python surface is small on purpose::

    from pml import CapabilityRegistry, Database, Scope

    db = await Database.open("sqlite:///pml.db")
    registry = CapabilityRegistry(db)
    found = await registry.resolve(Scope("local", "default", "me"), "mcp:filesystem")

The names are imported when first used, so that ``import pml`` (and every ``pml`` command
that never touches the database) does not pay for SQLAlchemy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pml.errors import PmlError
    from pml.registry.scope import Scope
    from pml.registry.service import CapabilityDraft, CapabilityRegistry
    from pml.storage.database import Database

    __version__: str

_LAZY: Final = {
    "CapabilityDraft": "pml.registry.service",
    "CapabilityRegistry": "pml.registry.service",
    "Database": "pml.storage.database",
    "PmlError": "pml.errors",
    "Scope": "pml.registry.scope",
}

__all__ = [
    "CapabilityDraft",
    "CapabilityRegistry",
    "Database",
    "PmlError",
    "Scope",
    "__version__",
]


def __getattr__(name: str) -> object:
    if name == "__version__":
        value: object = _installed_version()
    elif name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'pml' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pml-gateway")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0.0.0"
