"""Synthetic learned capabilities for the discovery benchmark and tests, made deterministically.

    sys.path.insert(0, "benchmarks")           # or "benchmarks/data" and import it directly
    from data.synthetic_capabilities import generate, target_capabilities
    caps = generate(2_000, seed=0)   # the 50 targets first, then their neighbours, then the rest
    caps[0]["display_name"], caps[0]["intent"]
    # ('gha:summarize_runs_failed', 'summarise the failed GitHub Actions workflow runs')

    python benchmarks/data/synthetic_capabilities.py --n 10000 --seed 0 [--out caps.json]

Intents are composed from domain × system × object × qualifier × verb (+ an output format,
a channel or a grouping) so that they read like the ones agents record ("export Stripe
invoices from last month to CSV"). The vocabulary, 36 domains from CI/CD to e-commerce, is
``synthetic_capabilities.json`` beside this file; it makes about 18 900 combinations and
``generate`` takes ``n`` of them. Each capability is a dict ``{id, display_name, intent,
description, tools_used, parameters_schema, code, domain, target}``. ``id`` is FQDN-shaped
(``local.default.<ns>.<action>.<sha256(code)[:4]>``) and depends on the rendering only,
never on ``seed`` or ``n``, so the query sets can name it (``capability:<id>``); display
names (``<ns>:<action>``) are unique too.

The ``TARGETS`` (the vocabulary's ``targets``) are always included with ``target: true``:
the query sets refer to them. Right after them come their neighbours (the same object in
the domain's other systems, other verbs and qualifiers on the same object, the system's
other objects): the distractors that keep the benchmark from being trivial. Nothing here
duplicates a reference server's tool (no reading or writing local files, clocks, fetching
a URL, local git or a knowledge graph); cloud drives and buckets, GitHub, calendars, CRM
notes and website audits are the neighbouring domains.

Qualifiers are written ``"failed"`` (before the system name), ``"crash-looping=crashlooping"``
(with its slug), ``"+on the main branch=on_main"`` (after the noun) and ``"@from last
month=last_month:30"`` (a time window of 30 days, which adds a ``days`` parameter).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCABULARY = Path(__file__).with_suffix(".json")
ORG, PROJECT = "local", "default"
MAX_NAME = 64
Schema = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Qual:
    """A qualifier: before the system name ("failed GitHub Actions runs") or after it."""

    slug: str
    text: str
    pre: bool = True
    days: int | None = None

    @classmethod
    def parse(cls, spec: str) -> Qual:
        pre = spec[0] not in "+@"
        body = spec if pre else spec[1:]
        days: int | None = None
        if spec[0] == "@":
            body, count = body.rsplit(":", 1)
            days = int(count)
        text, _, slug = body.partition("=")
        return cls(slug or _slug(text), text, pre, days)

    @property
    def params(self) -> Schema:
        if self.days is None:
            return {}
        doc = "How many days back to look."
        return {"days": {"type": "integer", "minimum": 1, "default": self.days, "description": doc}}


@dataclass(frozen=True, slots=True)
class Action:
    """A verb specific to an object; its template may use {np}, {sys} and {qual}."""

    slug: str
    template: str
    tool: str
    returns: str
    quals: tuple[str, ...] | None  # the qualifiers it combines with (None: all of them)
    params: Schema
    lists: bool  # lists the objects first (tools_used starts with list_<objects>)


@dataclass(frozen=True, slots=True)
class Obj:
    """What a domain's systems hold: pipelines, invoices, pods ..."""

    slug: str
    plural: str
    quals: tuple[Qual, ...]
    actions: tuple[Action, ...]
    names: dict[str, str]  # the plural some systems use instead ("merge requests")
    groups: tuple[tuple[str, str], ...]
    skip: frozenset[str]  # generic verbs that make no sense for it
    only: frozenset[str]  # the systems that have it (empty: all)
    params: Schema


@dataclass(frozen=True, slots=True)
class System:
    label: str
    ns: str
    server: str


@dataclass(frozen=True, slots=True)
class Domain:
    key: str
    label: str
    systems: tuple[System, ...]
    objects: tuple[Obj, ...]
    params: Schema


def _slug(text: str) -> str:
    return re.sub(r"\W+", "_", text).strip("_").lower()


def _string(description: str, default: str | None = None) -> Schema:
    out: Schema = {"type": "string", "description": description}
    if default is not None:
        out["default"] = default
    return out


def _load_action(data: dict[str, Any]) -> Action:
    quals = data.get("quals")
    return Action(
        data["slug"],
        data["template"],
        data["tool"],
        data["returns"],
        None if quals is None else tuple(quals),
        data.get("params", {}),
        data.get("lists", True),
    )


def _load_obj(data: dict[str, Any]) -> Obj:
    return Obj(
        data["slug"],
        data["plural"],
        tuple(Qual.parse(q) for q in data["quals"]),
        tuple(_load_action(a) for a in data["actions"]),
        data.get("names", {}),
        tuple((_slug(group), group) for group in data.get("groups", ())),
        frozenset(data.get("skip", ())),
        frozenset(data.get("only", ())),
        data.get("params", {}),
    )


def _load_domain(data: dict[str, Any]) -> Domain:
    systems = tuple(System(*system) for system in data["systems"])
    objects = tuple(_load_obj(item) for item in data["objects"])
    return Domain(data["key"], data["label"], systems, objects, data.get("params", {}))


@dataclass(frozen=True, slots=True)
class Target:
    """A combination by its slugs: domain, system ns, object, qualifier, verb, extra."""

    domain: str
    ns: str
    obj: str
    qual: str | None
    verb: str
    extra: str | None = None


_VOCABULARY = json.loads(VOCABULARY.read_text())
DOMAINS: tuple[Domain, ...] = tuple(_load_domain(item) for item in _VOCABULARY["domains"])
TARGETS: tuple[Target, ...] = tuple(Target(*item) for item in _VOCABULARY["targets"])


# -- verbs every object takes --------------------------------------------------------------

# (slug, intent template, tool prefix, what it returns); {np} is the noun phrase.
GENERIC: tuple[tuple[str, str, str, str], ...] = (
    ("list", "list {np}", "list", "the matching {objs} with their key fields"),
    ("summarize", "summarise the {np}", "list", "a short markdown summary"),
    ("search", "find {np} that mention a keyword", "search", "the matching {objs}"),
    ("report", "build a weekly report on {np}", "list", "a link to the report page"),
    ("compare", "compare {np} with the previous period", "list", "the change per metric"),
    ("chart", "chart {np} over time", "list", "a PNG chart and its data series"),
    ("watch", "alert me when new {np} show up", "list", "the alerts it sent"),
)
GENERIC_EXTRA_TOOL = {
    "report": "notion:create_page",
    "chart": "charts:render_line_chart",
    "watch": "slack:post_message",
}
FORMATS = (
    ("csv", "CSV", "filesystem:write_file"),
    ("json", "JSON", "filesystem:write_file"),
    ("xlsx", "an Excel workbook", "filesystem:write_file"),
    ("gsheet", "a Google Sheet", "gsheets:append_rows"),
)
CHANNELS = (
    ("slack", "to a Slack channel", "slack:post_message"),
    ("teams", "to Microsoft Teams", "teams:send_message"),
    ("email", "by email", "gmail:send_email"),
)
DEFAULT_GROUPS = (("per_week", "per week"), ("per_month", "per month"))


@dataclass(frozen=True, slots=True)
class Spec:
    """One combination; ``render`` turns it into a capability dict."""

    domain: Domain
    system: System
    obj: Obj
    qual: Qual | None
    verb: str  # a GENERIC slug, "export", "count", "digest", or an Action slug
    extra: str | None = None  # the format, grouping or channel slug

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        qual_slug = self.qual.slug if self.qual else ""
        return (self.system.ns, self.obj.slug, qual_slug, self.verb, self.extra or "")


# -- rendering -----------------------------------------------------------------------------


def _plural(spec: Spec) -> str:
    return spec.obj.names.get(spec.system.ns, spec.obj.plural)


def noun_phrase(spec: Spec) -> str:
    """``[pre-qualifier] <System> <objects> [post-qualifier]``."""
    head = f"{spec.system.label} {_plural(spec)}"
    if spec.qual is None:
        return head
    return f"{spec.qual.text} {head}" if spec.qual.pre else f"{head} {spec.qual.text}"


def _action(spec: Spec) -> Action | None:
    return next((a for a in spec.obj.actions if a.slug == spec.verb), None)


def _pick(options: Sequence[tuple[str, str, str]], slug: str | None) -> tuple[str, str]:
    return next((label, tool) for key, label, tool in options if key == slug)


def _intent_and_tools(spec: Spec) -> tuple[str, list[str], str]:
    """The intent, the tools it uses and what it returns."""
    np = noun_phrase(spec)
    server = spec.system.server
    listing = f"{server}:list_{spec.obj.slug}"
    action = _action(spec)
    if action is not None:
        qual_text = spec.qual.text if spec.qual else ""
        intent = action.template.format(np=np, sys=spec.system.label, qual=qual_text)
        tools = [f"{server}:{action.tool}"]
        return intent, [listing, *tools] if action.lists else tools, action.returns
    if spec.verb == "export":
        label, tool = _pick(FORMATS, spec.extra)
        return f"export {np} to {label}", [listing, tool], "where the export was written"
    if spec.verb == "digest":
        label, tool = _pick(CHANNELS, spec.extra)
        return f"send a daily digest of {np} {label}", [listing, tool], "the posted digest"
    if spec.verb == "count":
        groups = spec.obj.groups or DEFAULT_GROUPS
        label = next(text for slug, text in groups if slug == spec.extra)
        return f"count {np} {label}", [listing], "the counts per group"
    _, template, prefix, returns = next(v for v in GENERIC if v[0] == spec.verb)
    tools = [f"{server}:{prefix}_{spec.obj.slug}"]
    if spec.verb in GENERIC_EXTRA_TOOL:
        tools.append(GENERIC_EXTRA_TOOL[spec.verb])
    return template.format(np=np), tools, returns.format(objs=_plural(spec))


def _action_name(spec: Spec) -> str:
    parts = [spec.verb, spec.obj.slug]
    if spec.qual is not None:
        parts.append(spec.qual.slug)
    if spec.extra:
        parts.append(spec.extra)
    name = "_".join(parts)
    room = MAX_NAME - len(spec.system.ns) - 1
    return name if len(name) <= room else name[:room].rstrip("_")


def _schema(spec: Spec) -> Schema:
    props: Schema = {**spec.domain.params, **spec.obj.params}
    required = [name for name, schema in props.items() if "default" not in schema]
    if spec.qual is not None:
        props.update(spec.qual.params)
    action = _action(spec)
    if action is not None:
        props.update(action.params)
        required += [name for name, schema in action.params.items() if "default" not in schema]
    elif spec.verb == "export" and spec.extra == "gsheet":
        props["target_spreadsheet"] = _string("Spreadsheet to append the rows to.")
        required.append("target_spreadsheet")
    elif spec.verb == "export":
        where = f"exports/{spec.obj.slug}.{spec.extra}"
        props["output_path"] = _string(
            f"Where to write the {(spec.extra or '').upper()} file.", where
        )
    elif spec.verb == "digest":
        props["channel"] = _string("Channel, team or address to post to.")
        required.append("channel")
    elif spec.verb == "count":
        props["group_by"] = _string("Grouping.", spec.extra)
    elif spec.verb == "search":
        props["keyword"] = _string("Text to look for.")
        required.append("keyword")
    elif spec.verb in ("list", "summarize"):
        props["limit"] = {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}
    schema: Schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


def _code(display_name: str, tools: list[str], schema: Schema) -> str:
    call_args = ", ".join(f'{name}=args.get("{name}")' for name in schema["properties"])
    lines: list[str] = []
    for index, tool in enumerate(tools):
        server, name = tool.split(":", 1)
        args = call_args if index == 0 else f"data=step_{index - 1}"
        lines.append(f"step_{index} = await mcp.{server}.{name}({args})")
    lines.append(f'return {{"capability": "{display_name}", "result": step_{len(tools) - 1}}}')
    return "\n".join(lines)


def render(spec: Spec, *, target: bool = False) -> dict[str, Any]:
    """The capability dict of one combination."""
    intent, tools, returns = _intent_and_tools(spec)
    intent = " ".join(intent.split())
    action = _action_name(spec)
    display_name = f"{spec.system.ns}:{action}"
    schema = _schema(spec)
    code = _code(display_name, tools, schema)
    digest = hashlib.sha256(code.encode()).hexdigest()[:4]
    description = (
        f"{intent[0].upper()}{intent[1:]} ({spec.domain.label}, {spec.system.label}). "
        f"Calls {', '.join(tools)}; returns {returns}."
    )
    return {
        "id": f"{ORG}.{PROJECT}.{spec.system.ns}.{action}.{digest}",
        "display_name": display_name,
        "intent": intent,
        "description": description,
        "tools_used": tools,
        "parameters_schema": schema,
        "code": code,
        "domain": spec.domain.key,
        "target": target,
    }


# -- enumeration ---------------------------------------------------------------------------


def _one(options: Sequence[tuple[str, ...]], *key: str) -> list[tuple[str, ...]]:
    """One option, chosen by a stable hash of ``key`` (so exports are not 4x everything else)."""
    index = hashlib.sha256("/".join(key).encode()).digest()[0] % len(options)
    return [options[index]]


def _verbs(
    system: System, obj: Obj, qual: Qual | None, *, every_extra: bool = False
) -> Iterator[tuple[str, str | None]]:
    """The verbs (and extras) that make sense for ``obj`` with ``qual``.

    One output format and one channel per system, object and qualifier, unless
    ``every_extra`` (which checks a target, whatever format or channel it names).
    """
    timeless = qual is None or qual.days is None
    key = (system.ns, obj.slug, qual.slug if qual else "")
    for slug, *_ in GENERIC:
        if slug not in obj.skip and (slug != "watch" or timeless):
            yield slug, None
    if "export" not in obj.skip:
        for slug, *_ in FORMATS if every_extra else _one(FORMATS, "export", *key):
            yield "export", slug
    if "count" not in obj.skip:
        for slug, label in obj.groups or DEFAULT_GROUPS:
            if timeless or label in ("per day", "per hour") or not label.startswith("per "):
                yield "count", slug
    if "digest" not in obj.skip and timeless:
        for slug, *_ in CHANNELS if every_extra else _one(CHANNELS, "digest", *key):
            yield "digest", slug
    for action in obj.actions:
        if qual is None or action.quals is None or qual.slug in action.quals:
            yield action.slug, None


def _has(system: System, item: Obj) -> bool:
    return not item.only or system.ns in item.only


def _specs_of(
    dom: Domain, system: System, item: Obj, *, every_extra: bool = False
) -> Iterator[Spec]:
    for q in (None, *item.quals):
        for verb, extra in _verbs(system, item, q, every_extra=every_extra):
            yield Spec(dom, system, item, q, verb, extra)


def all_specs() -> Iterator[Spec]:
    """Every combination, in a fixed order."""
    for dom in DOMAINS:
        for system in dom.systems:
            for item in dom.objects:
                if _has(system, item):
                    yield from _specs_of(dom, system, item)


def _find(target: Target) -> Spec:
    dom = next(d for d in DOMAINS if d.key == target.domain)
    system = next(x for x in dom.systems if x.ns == target.ns)
    item = next(o for o in dom.objects if o.slug == target.obj)
    q = next(x for x in item.quals if x.slug == target.qual) if target.qual else None
    spec = Spec(dom, system, item, q, target.verb, target.extra)
    valid = {x.key for x in _specs_of(dom, system, item, every_extra=True)}
    if not _has(system, item) or spec.key not in valid:
        raise ValueError(f"not a valid combination: {target}")
    return spec


def _neighbours(spec: Spec, rng: random.Random) -> list[Spec]:
    """A target's distractors: other systems, verbs and qualifiers, the system's other objects."""
    near = [
        Spec(spec.domain, system, spec.obj, spec.qual, spec.verb, spec.extra)
        for system in spec.domain.systems
        if system != spec.system and _has(system, spec.obj)
    ]
    same = list(_specs_of(spec.domain, spec.system, spec.obj))
    rng.shuffle(same)
    near.extend(same[:8])
    for item in spec.domain.objects:
        if item != spec.obj and _has(spec.system, item):
            options = list(_specs_of(spec.domain, spec.system, item))
            near.extend(rng.sample(options, min(2, len(options))))
    return near


def target_capabilities() -> list[dict[str, Any]]:
    """The capabilities the query sets refer to (``target: true``), in TARGETS order."""
    return [render(_find(target), target=True) for target in TARGETS]


def generate(n: int = 1000, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` capabilities: the TARGETS, then their neighbours, then a seeded sample of the rest.

    ``n`` is at least ``len(TARGETS)`` and at most the number of combinations (about 18 900);
    the same ``(n, seed)`` always gives the same list.
    """
    if n < len(TARGETS):
        raise ValueError(f"n must be at least {len(TARGETS)} (the targets), got {n}")
    rng = random.Random(seed)
    targets = [_find(target) for target in TARGETS]
    chosen: dict[tuple[str, ...], tuple[Spec, bool]] = {t.key: (t, True) for t in targets}
    neighbours = [near for target in targets for near in _neighbours(target, rng)]
    rest = list(all_specs())
    rng.shuffle(rest)
    for spec in (*neighbours, *rest):
        if len(chosen) >= n:
            break
        chosen.setdefault(spec.key, (spec, False))
    if len(chosen) < n:
        raise ValueError(f"only {len(chosen)} combinations exist, asked for {n}")
    caps = [render(spec, target=is_target) for spec, is_target in chosen.values()]
    if len({cap["display_name"] for cap in caps}) != len(caps):
        raise AssertionError("two capabilities got the same display name")
    return caps


def main() -> None:
    parser = argparse.ArgumentParser(description="Generate synthetic learned capabilities.")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the capabilities there as JSON")
    args = parser.parse_args()
    caps = generate(args.n, seed=args.seed)
    if args.out:
        args.out.write_text(json.dumps(caps, indent=1) + "\n")
    summary = {
        "n": len(caps),
        "combinations": sum(1 for _ in all_specs()),
        "domains": len({cap["domain"] for cap in caps}),
        "targets": sum(1 for cap in caps if cap["target"]),
        "sample": [cap["intent"] for cap in random.Random(args.seed).sample(caps, 8)],
    }
    json.dump(summary, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
