"""Upstream MCP servers: one reused client session per configured server."""
