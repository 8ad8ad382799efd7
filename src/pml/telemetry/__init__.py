"""Observing a running gateway: metrics, traces and logs (SPEC §11)."""
