"""The policy gateway of tests/policy, for the quota's end-to-end test."""

from __future__ import annotations

from policy.conftest import open_policy_gateway  # noqa: F401 - a fixture re-used here
