"""The capability registry: identity (FQDN), names, versions, routing and name patterns.

The modules here are pure functions and values; storage and the rules that need it live in
the repository and service layers built on top of them.
"""
