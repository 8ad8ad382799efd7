"""The people's face of PML: the REST API under ``/api`` and the dashboard under ``/ui/``.

    services = WebServices(...)                  # the same services the MCP face uses
    routes = [*api_routes(services), *dashboard_routes(services, ui)]

Nothing here imports the MCP layer (``pml.gateway``): the gateway assembles these routes
beside ``/mcp``, and ``pml dashboard`` serves them alone over the local database.
"""
