"""The shared pieces of capability queries: what is active, what a scope may see, and the
one name-resolution statement (built once; only its parameters change per call).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope
from pml.storage.tables import capability_aliases as aliases
from pml.storage.tables import capability_records as records

RECORD_FIELDS = tuple(column.key for column in records.columns)
# Archived records keep their row for history but leave every list and name.
ACTIVE = records.c.archived_at.is_(None)


def visible_to(scope: Scope) -> sa.ColumnElement[bool]:
    """The SQL condition for records ``scope`` may see."""
    r = records.c
    return sa.or_(
        sa.and_(
            r.org == scope.org,
            r.project == scope.project,
            sa.or_(r.visibility != "private", r.created_by == scope.user),
        ),
        sa.and_(r.org == scope.org, r.visibility == "org"),
        r.visibility == "public",
    )


def _resolve_statement() -> sa.Select[Any]:
    """The name-resolution query, built once: only its parameters change per call."""
    r, a = records.c, aliases.c
    org, project, user, name = (
        sa.bindparam(key, type_=sa.String()) for key in ("org", "project", "user", "name")
    )
    # Archived records resolve by no name (``cap_whois`` by FQDN still shows them).
    own = sa.and_(
        ACTIVE,
        r.org == org,
        r.project == project,
        sa.or_(r.visibility != "private", r.created_by == user),
    )
    others = sa.or_(sa.and_(r.org == org, r.visibility == "org"), r.visibility == "public")
    visible = sa.or_(own, sa.and_(ACTIVE, others))
    alias_scope = (a.org == org, a.project == project)
    # Alias branches probe the alias index once, then the primary key: a plan that stays
    # good whatever the planner's statistics say.
    by_alias = sa.select(a.target_fqdn).where(*alias_scope, a.alias == name).scalar_subquery()
    tool_alias = (
        sa.select(a.target_fqdn, a.alias)
        .where(*alias_scope, a.tool_name == name)
        .order_by(a.created_at.desc())
        .limit(1)
        .subquery()
    )
    via_tool_alias = records.join(tool_alias, tool_alias.c.target_fqdn == r.fqdn)

    def branch(priority: int, alias: Any, source: Any, *where: Any) -> Any:
        return (
            sa.select(*records.c, sa.literal(priority).label("priority"), alias.label("via_alias"))
            .select_from(source)
            .where(*where)
        )

    query = sa.union_all(
        branch(1, sa.null(), records, own, r.display_name == name),
        branch(2, name, records, own, r.fqdn == by_alias),
        branch(3, sa.null(), records, own, r.tool_name == name),
        branch(4, tool_alias.c.alias, via_tool_alias, own),
        branch(5, sa.null(), records, visible, r.fqdn == name),
        branch(6, sa.null(), records, visible, r.id == name),  # the capabilityId
        branch(7, sa.null(), records, ACTIVE, r.display_name == name, r.visibility == "public"),
    ).subquery()
    return sa.select(query).order_by(query.c.priority, query.c.created_at, query.c.fqdn).limit(1)


RESOLVE_STATEMENT = _resolve_statement()


def record_of(row: sa.Row[Any]) -> CapabilityRecord:
    """The record a ``capability_records`` row holds."""
    data = row._mapping  # pyright: ignore[reportPrivateUsage]
    return CapabilityRecord(**{name: data[name] for name in RECORD_FIELDS})
