"""PML's migrations, one file per revision; ``storage.database.SHIPPED_HEAD`` names the newest.

Rules for a new one:
- It runs on SQLite and PostgreSQL alike (``op.get_bind().dialect.name`` where they differ).
- On SQLite, ``op.batch_alter_table`` rebuilds a table for changes SQLite cannot make in
  place, and a rebuilt table loses its triggers. ``capability_records`` carries the count
  triggers of 0016; ``capability_versions`` and ``capability_version_tags`` carry those of
  0002 and 0011. A migration that rebuilds one of them creates its triggers again (and its
  downgrade too). ``tests/storage/test_triggers.py`` lists every trigger expected at head.
"""
