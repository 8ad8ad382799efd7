"""The no-collision pipeline (SPEC §10): intent router, capability map, policy gate,
permission rules and grants, approvals and the audit log."""
