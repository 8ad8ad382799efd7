"""Running agent snippets with no way out but the ``mcp`` bridge (SPEC §4)."""
