"""Print how to connect Claude Code or Cursor to the PML that ``make run`` starts.

    .venv/bin/python scripts/connect_info.py --config examples/pml.toml --http 127.0.0.1:8765

Two ways, both printed as ready ``mcpServers`` JSON:

- stdio: the client starts PML itself. The example config names its servers by paths
  relative to the repository (``.venv/bin/...``, ``.e2e/...``), and MCP clients start servers
  in a directory of their own choosing, so the command first moves to the repository.
- HTTP: the client connects to the gateway ``make run`` is starting, with an API key of the
  config's ``[scope]``. The key is kept (mode 600) in ``.pml/local-api-key.json``, which is
  gitignored, and reused while the database still holds it as active; otherwise a new one
  is created (``pml keys create``), since PML stores only a hash and shows a key once.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PML = ROOT / ".venv" / "bin" / "pml"
KEY_FILE = ROOT / ".pml" / "local-api-key.json"


def pml(config: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(PML), "--config", str(config), *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        sys.exit(f"pml {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def local_key(config: Path) -> dict[str, Any]:
    """The saved key if the database still has it active, else a new one (saved)."""
    scope = tomllib.loads(config.read_text()).get("scope", {})
    org, project = scope.get("org", "local"), scope.get("project", "default")
    if KEY_FILE.exists():
        saved = json.loads(KEY_FILE.read_text())
        listed = pml(config, "keys", "list", "--org", org, "--project", project)["items"]
        if any(item["id"] == saved.get("id") and item["active"] for item in listed):
            return saved
    created = pml(
        config, "keys", "create", "--org", org, "--project", project, "--user", "make-run"
    )
    KEY_FILE.parent.mkdir(exist_ok=True)
    fd = os.open(KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(created, out)
    return created


def main() -> None:
    parser = argparse.ArgumentParser(description="How to connect an MCP client to PML.")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--http", required=True, metavar="HOST:PORT")
    args = parser.parse_args()
    config = args.config.resolve()
    key = local_key(config)
    url = f"http://{args.http}/mcp"
    relative = config.relative_to(ROOT) if config.is_relative_to(ROOT) else config
    command = f"cd {shlex.quote(str(ROOT))} && exec .venv/bin/pml --config {relative} serve --stdio"
    stdio = {"mcpServers": {"pml": {"command": "/bin/sh", "args": ["-c", command]}}}
    http = {
        "mcpServers": {
            "pml": {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer {key['key']}"},
            }
        }
    }
    shown_key_file = KEY_FILE.relative_to(ROOT)
    print(
        f"""
PML gateway: {url}  (scope {key["org"]}.{key["project"]}, config {relative})

Connect Claude Code (.mcp.json) or Cursor (.cursor/mcp.json), either way:

  1. stdio: the client starts its own PML (this gateway need not be running)
{json.dumps(stdio, indent=2)}

  2. HTTP: the client connects to the gateway starting below (key kept in {shown_key_file})
{json.dumps(http, indent=2)}

  Claude Code from the command line:
    claude mcp add --transport http pml {url} --header "Authorization: Bearer {key["key"]}"

Starting the gateway (Ctrl-C stops it and every upstream server)...
""",
        flush=True,
    )


if __name__ == "__main__":
    main()
