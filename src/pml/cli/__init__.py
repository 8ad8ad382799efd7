"""The ``pml`` command line: one typer sub-app or command module per group."""
