"""``pml dashboard [--port P]``: the dashboard over the local database, on loopback only.

    $ pml dashboard
    PML dashboard: http://127.0.0.1:8766/ui/signin?token=Zk3…   (open it once to sign in)

It listens on 127.0.0.1 and nowhere else (there is no option to change that: a shared PML
serves its dashboard with ``pml serve --http``). The printed URL carries a one-time token:
the first visit exchanges it for a session cookie as the person at this terminal (an admin
of the configured ``[scope]``, ``decided_by`` ``user:<OS login>``), then it never works again.

Like ``pml approvals approve`` on the local database, it starts only for a person at an
interactive terminal: an agent's shell is not one, and an agent that could start it could
read the link and approve its own requests.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from pml.cli.common import ConfigOption, load_cli_settings, run_command
from pml.errors import ConfigError, Forbidden, InvalidInput

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8766
NO_TERMINAL = (
    "pml dashboard needs a person at an interactive terminal (stdin and stderr are not "
    "one): its sign-in link is a person's, so run it in your own shell; a shared PML serves "
    "its dashboard with pml serve --http"
)


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        raise InvalidInput("Cannot tell who you are (no OS login name): set $USER") from None


def loopback_socket(port: int) -> socket.socket:
    """A TCP socket bound to 127.0.0.1:``port`` (0: a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(128)  # before the URL is printed: a visit at once is answered
    except OSError:
        sock.close()
        raise
    return sock


async def serve_dashboard(
    settings: object, port: int, user: str, announce: Callable[[str], None]
) -> None:
    """Serve the dashboard on 127.0.0.1:``port`` until SIGINT/SIGTERM."""
    import uvicorn
    from starlette.applications import Starlette

    from pml.config import Settings
    from pml.registry.scope import Principal, Scope
    from pml.web.dashboard import dashboard_routes
    from pml.web.dashboard.sessions import SignInTokens
    from pml.web.services import open_web_services
    from pml.wiring import scope_of

    assert isinstance(settings, Settings)
    deployment = scope_of(settings)
    principal = Principal(Scope(deployment.org, deployment.project, user), "admin")
    try:
        sock = loopback_socket(port)
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"cannot serve the dashboard on {LOOPBACK}:{port}: {reason}") from None
    with contextlib.closing(sock):
        async with open_web_services(settings) as services:
            tokens = SignInTokens(principal)
            app = Starlette(routes=dashboard_routes(services, signin=tokens))
            config = uvicorn.Config(app, log_level="warning", lifespan="off", server_header=False)
            server = uvicorn.Server(config)
            bound = sock.getsockname()[1]
            announce(f"http://{LOOPBACK}:{bound}/ui/signin?token={tokens.issue()}")
            await server.serve([sock])


def register(app: typer.Typer) -> None:
    """Add ``dashboard`` to the ``pml`` application."""

    @app.command("dashboard")
    def dashboard(
        ctx: typer.Context,
        port: Annotated[
            int,
            typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
        ] = DEFAULT_PORT,
        config: ConfigOption = None,
    ) -> None:
        """The dashboard on 127.0.0.1 over the local database, with a one-time sign-in URL."""

        async def body() -> None:
            if not (sys.stdin.isatty() and sys.stderr.isatty()):
                raise Forbidden(NO_TERMINAL)
            settings = load_cli_settings(ctx, config)
            await serve_dashboard(settings, port, _login(), _announce)

        try:
            run_command(body)
        except KeyboardInterrupt:
            raise typer.Exit(code=130) from None


def _announce(url: str) -> None:
    print(
        f"PML dashboard: {url}\n(open it once to sign in; it listens on {LOOPBACK} only)",
        file=sys.stderr,
        flush=True,
    )
