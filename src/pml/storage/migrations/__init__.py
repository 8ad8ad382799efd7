"""Alembic migrations for PML (SQLite and PostgreSQL), run by ``pml.storage.database``."""
