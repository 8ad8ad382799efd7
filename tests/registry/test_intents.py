"""The rules of remembered intents (``pml.registry.intents``): what is kept of an intent,
when two are the same, and which ones the bound drops."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from pml.registry.intents import (
    MAX_KEPT,
    MAX_TEXT,
    SAME_MEANING,
    Kept,
    intent_text,
    lexical_similarities,
    normalised,
    same_meaning,
    settled,
    sighted,
    to_drop,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Credentials of the shapes the audit scrubs (built so that no literal secret sits here).
SECRETS = [
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "sk-" + "proj4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5",
    "AKIA" + "IOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N",
    "xoxb-" + "1234567890-abcdefghij",
]


def test_the_same_words_in_another_case_spacing_or_punctuation_are_one_intent() -> None:
    first = intent_text("Read the JSON config!")
    second = intent_text("  read   the json, config ")
    assert first is not None
    assert second is not None
    assert first.text_hash == second.text_hash
    assert first.text == "Read the JSON config!"  # stored as written (trimmed)
    assert first.text_hash == hashlib.sha256(b"read the json config").hexdigest()
    other = intent_text("read the yaml config")
    assert other is not None
    assert other.text_hash != first.text_hash


def test_normalised_folds_unicode_compatibility_forms_and_case() -> None:
    assert normalised("ＲＥＡＤ  Straße—file") == "read strasse file"
    assert normalised("café") == normalised("cafe\u0301")


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_in_an_intent_is_never_kept(secret: str) -> None:
    found = intent_text(f"deploy the app with {secret} to staging")
    assert found is not None
    assert secret not in found.text
    assert secret[:12] not in found.text
    assert "[REDACTED]" in found.text
    assert found.text.startswith("deploy the app with")


def test_secrets_in_assignments_urls_and_bearer_headers_are_scrubbed() -> None:
    text = (
        "call https://ada:hunter2pass@api.example.com with Authorization: Bearer "
        "3f9a1c7e5b2d8f40a6c1 and password=Sup3rS3cret!"
    )
    found = intent_text(text)
    assert found is not None
    for secret in ("hunter2pass", "3f9a1c7e5b2d8f40a6c1", "Sup3rS3cret!"):
        assert secret not in found.text
    assert "api.example.com" in found.text


def test_an_intent_that_is_only_a_secret_or_punctuation_is_not_kept() -> None:
    assert intent_text(SECRETS[0]) is None
    assert intent_text("!!! ... ???") is None
    assert intent_text("   ") is None
    assert intent_text("\x00\x00") is None


@pytest.mark.parametrize("raw", [None, 42, b"bytes", ["read"], {"intent": "x"}, 3.5])
def test_anything_but_text_is_not_an_intent(raw: object) -> None:
    assert intent_text(raw) is None
    assert sighted("a.b.c.d.abcd", raw, "reuse", "ada", T0) is None


def test_a_huge_intent_is_cut_at_a_word_and_marked() -> None:
    found = intent_text("fetch the weather report " * 400)  # 10 000 characters
    assert found is not None
    assert len(found.text) <= MAX_TEXT
    assert found.text.endswith("…")
    assert found.text[:-1].rstrip().split()[-1] in {"fetch", "the", "weather", "report"}


def test_a_secret_crossing_the_cut_is_dropped_not_halved() -> None:
    token = SECRETS[0]
    found = intent_text("x " * 248 + "go " + token + " and more words after it")
    assert found is not None
    assert token[:8] not in found.text


def test_a_10000_character_token_without_spaces_leaves_nothing_to_keep() -> None:
    assert intent_text("a" * 10_000) is None


def test_nul_and_control_characters_become_spaces() -> None:
    found = intent_text("read\x00the\x07file\u2028now\x1b[31m")
    assert found is not None
    assert found.text == "read the file now [31m"
    assert "\x00" not in found.text


def test_unicode_and_injection_strings_are_kept_as_text() -> None:
    for raw in (
        "'; DROP TABLE capability_intents; --",
        "lire le fichier 📄 日本語のファイルを読む",
    ):
        found = intent_text(raw)
        assert found is not None
        assert found.text == raw


def test_lone_surrogates_do_not_reach_the_database() -> None:
    found = intent_text("read \ud800 the file")
    assert found is not None
    found.text.encode("utf-8")  # would raise on a lone surrogate


def test_sighted_carries_source_user_and_time_with_a_bounded_user() -> None:
    sighting = sighted("acme.web.fs.read.abcd", "Read it", "call", "u" * 500, T0)
    assert sighting is not None
    assert (sighting.fqdn, sighting.text, sighting.source) == (
        "acme.web.fs.read.abcd",
        "Read it",
        "call",
    )
    assert len(sighting.user) == 128
    assert sighting.seen_at == T0
    assert sighting.uses == 1


def test_a_sighting_is_queued_as_given_and_settled_before_it_is_stored() -> None:
    queued = sighted("a.b.c.d.abcd", f"Deploy with {SECRETS[0]}", "reuse", "ada", T0)
    assert queued is not None
    stored = settled(queued)
    assert stored is not None
    assert stored.text == "Deploy with [REDACTED]"
    assert stored.text_hash == hashlib.sha256(b"deploy with redacted").hexdigest()
    assert (stored.fqdn, stored.source, stored.user, stored.seen_at) == (
        queued.fqdn,
        queued.source,
        queued.user,
        queued.seen_at,
    )
    assert settled(stored) == stored  # settling twice changes nothing
    only_secret = sighted("a.b.c.d.abcd", SECRETS[2], "reuse", "ada", T0)
    assert only_secret is not None
    assert settled(only_secret) is None


def test_a_sighting_of_a_huge_or_hostile_text_is_bounded_when_queued() -> None:
    huge = sighted("a.b.c.d.abcd", "weather report " * 700, "reuse", "ada", T0)
    assert huge is not None
    assert len(huge.text) <= 2 * MAX_TEXT
    surrogate = sighted("a.b.c.d.abcd", "read \ud800 it", "reuse", "ada", T0)
    assert surrogate is not None
    assert sighted("a.b.c.d.abcd", "   ", "reuse", "ada", T0) is None


def test_same_meaning_picks_the_closest_at_or_above_the_threshold() -> None:
    row = [0.1, SAME_MEANING, 0.95, 0.99]
    assert same_meaning(row, [0, 1, 2]) == 2
    assert same_meaning(row, [0]) is None
    assert same_meaning(row, [1]) == 1
    assert same_meaning(row, []) is None


def _kept(count: int) -> list[Kept]:
    return [Kept(f"h{n:02d}", f"text {n}", T0 + timedelta(minutes=n)) for n in range(count)]


def test_within_the_bound_nothing_is_dropped() -> None:
    kept = _kept(MAX_KEPT)
    assert to_drop(kept, lexical_similarities([k.text for k in kept])) == []


def test_with_nothing_alike_the_least_recently_seen_goes() -> None:
    kept = _kept(MAX_KEPT + 2)
    none_alike = [[1.0 if a == b else 0.0 for b in range(len(kept))] for a in range(len(kept))]
    assert to_drop(kept, none_alike) == ["h00", "h01"]


def test_a_near_duplicate_goes_before_an_older_distinct_one() -> None:
    kept = _kept(MAX_KEPT + 1)
    matrix = [[1.0 if a == b else 0.0 for b in range(len(kept))] for a in range(len(kept))]
    matrix[5][6] = matrix[6][5] = 0.85  # 5 and 6 say nearly the same; 0 is oldest but unique
    assert to_drop(kept, matrix) == ["h05"]  # the older of the pair, the newer one stays


def test_the_newest_intent_always_stays() -> None:
    kept = _kept(3)
    everything_alike = [[1.0] * 3 for _ in range(3)]
    assert to_drop(kept, everything_alike, max_kept=1) == ["h00", "h01"]  # oldest first
    assert to_drop(kept, everything_alike, max_kept=0) == ["h00", "h01"]  # h02 stays


def test_lexical_similarity_is_the_word_overlap() -> None:
    matrix = lexical_similarities(["read the file", "read a file", "", "READ THE FILE!"])
    assert matrix[0][1] == pytest.approx(2 / 4)
    assert matrix[0][2] == 0.0
    assert matrix[0][3] == 1.0
