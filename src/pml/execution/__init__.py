"""``pml_execute``: its modes, the capture service and the tool caller (SPEC §5)."""
