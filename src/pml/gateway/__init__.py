"""The MCP server agents connect to: stdio and streamable HTTP, with API keys for HTTP."""
