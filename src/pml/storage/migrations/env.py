"""Alembic environment: migrations always run on a connection handed in by PML."""

from __future__ import annotations

from alembic import context

from pml.storage.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("PML migrations run through `pml db upgrade`, not the alembic CLI")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
