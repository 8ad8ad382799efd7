"""PML, the Procedural Memory Layer: an MCP gateway that learns capabilities.

The public Python surface is small on purpose::

    from pml import CapabilityRegistry, Database, Scope

    db = await Database.open("sqlite:///pml.db")
    registry = CapabilityRegistry(db)
    found = await registry.resolve(Scope("local", "default", "me"), "mcp:filesystem")
"""

from importlib.metadata import PackageNotFoundError, version

from pml.errors import PmlError
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

try:
    __version__ = version("pml-gateway")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = [
    "CapabilityDraft",
    "CapabilityRegistry",
    "Database",
    "PmlError",
    "Scope",
    "__version__",
]
