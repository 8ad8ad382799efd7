"""Storage: the schema, migrations and repositories shared by SQLite and PostgreSQL."""
