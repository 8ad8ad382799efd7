"""The sensitivity heuristics on a development set of phrasings, and on hostile text.

The three lists below were written before the heuristics; most phrasings do not contain a
keyword of ``pml.memory.personal_data`` verbatim. ``test_sensitivity_unseen.py`` holds
phrasings written after the heuristics, to check that they generalise.
"""

from __future__ import annotations

import time

import pytest

from pml.errors import InvalidInput
from pml.memory.sensitivity import (
    CREDENTIAL_SCAN_CHARS,
    HEURISTIC_SCAN_CHARS,
    MemoryVerdict,
    classify_text,
    normalise,
)

LOW = [
    "I prefer metric units",
    "the repo uses tabs",
    "our staging server is called beta",
    "Use pnpm instead of npm in this project",
    "The main branch is protected; open PRs against develop",
    "I like concise answers without emojis",
    "Always run ruff before committing",
    "The API listens on port 8080 locally",
    "Deploys happen on Tuesdays and Thursdays",
    "My favourite editor is Neovim",
    "The team's standup is at 9:30 CET",
    "Call the user Sam in greetings",
    "The database migration tool is Alembic",
    "Prefer British spelling in documentation",
    "The CI pipeline takes about 12 minutes",
    "We pin numpy to 1.26 until the upgrade lands",
    "The health check endpoint is /healthz",
    "The load balancer health check runs every 10 s",
    "Python version for this repo is 3.11",
    "Tests live in tests/ and mirror src/",
    "The product name is spelled PML, all caps",
    "Use UTC timestamps in logs",
    "I dislike long meetings",
    "The build artefacts go to s3://acme-builds/releases",
    "Our docs are hosted at https://docs.example.com/pml",
    "Use 4-space indentation in YAML files",
    "The release version is 2.4.1",
    "The race condition in the scheduler was fixed in v1.3",
    "Run `brew doctor` if Homebrew misbehaves",
    "Diagnostics are written to /var/log/pml/diag.log",
    "The password reset flow lives in src/auth/reset.py",
    "The token budget for the agent is 6000 tokens",
    "Read the API token from the PML_TOKEN environment variable",
    "Dark mode in every tool, please",
    "I usually work from 8am to 4pm",
    "The git remote is git@github.com:acme/webapp.git",
    "Commit messages follow Conventional Commits",
    "The staging database is called pml_staging",
    "My go-to language for scripts is Python",
    "Summaries should fit in three bullet points",
    "The coffee machine on floor 2 is broken",
    "Order ids look like ORD-2024-000123",
    "The cache TTL is 300 seconds",
    "Pin the Docker base image to python:3.11-slim",
    "We use semantic versioning for tags",
    "Spawn a child process per worker and pass its address over a pipe",
    "The passwords are hashed with argon2id",
]

HIGH = [
    "my card number is 4111 1111 1111 1111",
    "Visa ending 4242 4242 4242 4242 expires 12/27",
    "5555-5555-5555-4444 is the company card",
    "My IBAN is DE89 3704 0044 0532 0130 00",
    "routing number 021000021, account 000123456789",
    "My social security number is 123-45-6789",
    "SSN: 078-05-1120",
    "passport number X12345678",
    "I was born on 14 March 1987",
    "my date of birth is 1990-04-12",
    "My mobile is +44 7700 900123",
    "Call me at (415) 555-2671",
    "my personal email is jane.doe@gmail.com",
    "I live at 221B Baker Street, London",
    "Our home address is 1600 Pennsylvania Avenue NW",
    "I have type 2 diabetes",
    "I was diagnosed with ADHD last year",
    "I take 50 mg of sertraline every morning",
    "I'm allergic to penicillin",
    "My wife is pregnant with our second child",
    "I see a therapist on Thursdays for my anxiety",
    "I'm recovering from depression",
    "My salary is $120,000 a year",
    "I have $40k of student loan debt",
    "my credit score is 712",
    "My bank balance is about 3,200 euros",
    "I owe the IRS back taxes",
    "My mortgage payment is 1800 a month",
    "My wife's number is 555 867 5309",
    "Anna's email is anna.k@example.org",
    "My mom's address is 12 Rue de la Paix, Paris",
    "I'm a practising Muslim",
    "I voted for the Green party in the last election",
    "I'm gay and not out at work",
    "Faith matters to me, I go to church every Sunday",
    "Don't ask for my card number again",
    "Remind me my blood pressure was 150/95 at the last check-up",
    "My son has autism",
    "I'm on chemotherapy until June",
    "My GPS location right now is 48.8584, 2.2945",
    "My National Insurance number is QQ 12 34 56 C",
    "I earn 85k before tax",
    "I had a miscarriage last spring",
    "I've been sober for two years after rehab",
    "My boss's cell is 07700 900456",
    "My birthday is on July 4th",
    "I have a criminal record from 2009",
    "I'm bisexual",
    "My husband was just diagnosed with cancer",
    "I'm a member of the Labour Party",
]

CREDENTIAL = [
    "my password is hunter2",
    "The wifi password: Tr0ub4dor&3",
    "pwd: correcthorse",
    "OPENAI_API_KEY=sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e",
    "GitHub token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "AWS key AKIAIOSFODNN7EXAMPLE",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
    "the database is postgres://admin:s3cretPass@db.internal:5432/app",
    "Authorization: Bearer 3f9a1c7e5b2d8f40a6c1d2e3",
    "my slack token is xoxb-123456789012-abcdefghij",
    "the api key is 8f2a9c1e7b3d4f6a0c5e9b2d",
    "My bank PIN is 4821",
    'the passphrase for the ssh key is "blue monkey tractor"',
    "login: alice / password: Summer2024!",
    "The admin passcode is 990311",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc",
    "My 2FA backup codes are 3847-2910 and 5521-0093",
    "the CVV on my card is 737",
    "Mot de passe : Soleil2023",
    "Stripe secret sk_live_51HxYzAbCdEfGhIjKlMn",
    "Remember my Netflix login: bob@example.com, pw Xy7!pass",
    "The recovery phrase is abandon ability able about above absent absorb abstract",
]


@pytest.mark.parametrize("text", LOW)
def test_preferences_and_project_facts_are_low(text: str) -> None:
    verdict = classify_text(text)
    assert verdict == MemoryVerdict("low", (), "heuristic"), verdict


@pytest.mark.parametrize("text", HIGH)
def test_personal_data_and_sensitive_categories_are_high(text: str) -> None:
    verdict = classify_text(text)
    assert verdict.level == "high", verdict
    assert verdict.reasons
    assert verdict.decided_by == "heuristic"


@pytest.mark.parametrize("text", CREDENTIAL)
def test_credentials_are_credential(text: str) -> None:
    verdict = classify_text(text)
    assert verdict.level == "credential", verdict
    assert verdict.reasons


def test_the_development_set_is_as_broad_as_promised() -> None:
    assert (len(LOW), len(HIGH), len(CREDENTIAL)) >= (40, 40, 20)
    assert len(set(LOW + HIGH + CREDENTIAL)) == len(LOW + HIGH + CREDENTIAL)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("my card number is 4111 1111 1111 1111", "a payment card number"),
        ("I have type 2 diabetes", "health information"),
        ("My salary is $120,000 a year", "financial information"),
        ("my personal email is jane.doe@gmail.com", "an e-mail address"),
        ("My wife's number is 555 867 5309", "someone's contact details"),
        ("My wife's number is 555 867 5309", "a phone number"),
        ("my password is hunter2", "a password"),
        ("I'm a practising Muslim", "religious beliefs"),
    ],
)
def test_reasons_are_short_human_phrases(text: str, reason: str) -> None:
    assert reason in classify_text(text).reasons


@pytest.mark.parametrize(
    "number",
    [
        "4111111111111111",
        "4111-1111-1111-1111",
        "4111 1111 1111 1111",
        "3782 822463 10005",
        "6011.1111.1111.1117",
        "４１１１ １１１１ １１１１ １１１１",  # fullwidth digits
        "4111\u200b1111\u200b1111\u200b1111",  # zero-width spaces inside
        "4111\u200e 1111\u200f 1111\u2066 1111",  # bidi marks inside
        "4\u00ad111 1111 1111 1111",  # a soft hyphen
        "order 12 then 4111 1111 1111 1111 then 99",
    ],
)
def test_a_card_number_is_found_however_it_is_written(number: str) -> None:
    verdict = classify_text(f"keep this: {number}")
    assert "a payment card number" in verdict.reasons, verdict


@pytest.mark.parametrize(
    "number", ["4111 1111 1111 1112", "1234 5678 9012 3456", "2024-06-01", "1.2.3"]
)
def test_digit_runs_that_fail_the_luhn_check_are_not_cards(number: str) -> None:
    assert "a payment card number" not in classify_text(f"note {number}").reasons


def test_an_iban_with_a_wrong_check_is_not_an_iban_by_shape() -> None:
    assert classify_text("ref GB82 WEST 1234 5698 7654 32").reasons == ("a bank account number",)
    assert classify_text("ref GB00 WEST 1234 5698 7654 32").level == "low"


def test_right_to_left_marks_and_tags_do_not_hide_words() -> None:
    hidden = "my dia\u200bbetes is \u202eunder control\u202c"
    assert "health information" in classify_text(hidden).reasons
    tagged = "pass\U000e0077word is hunter2"
    assert classify_text(tagged).level == "credential"


def test_fullwidth_and_compatibility_forms_are_normalised() -> None:
    assert classify_text("ｍｙ ｐａｓｓｗｏｒｄ ｉｓ ｈｕｎｔｅｒ２").level == "credential"
    assert classify_text("I am ＡＬＬＥＲＧＩＣ to nuts").level == "high"
    assert classify_text("My wife’s number is handy").level == "high"  # typographic apostrophe


@pytest.mark.parametrize(
    "text",
    ["", " ", "\x00\x01\x7f", "\ud800 lone surrogate", "🙂" * 1000, "\n" * 5000, "ß" * 100],
)
def test_odd_strings_are_classified_without_raising(text: str) -> None:
    assert classify_text(text).level == "low"


def test_a_str_subclass_cannot_change_what_is_read() -> None:
    class Sneaky(str):
        def casefold(self) -> str:
            return "nothing to see"

        def __str__(self) -> str:
            return "nothing to see"

    assert classify_text(Sneaky("my password is hunter2")).level == "credential"


@pytest.mark.parametrize("value", [None, 42, b"my password is hunter2", ["x"]])
def test_a_value_that_is_not_text_is_invalid_input(value: object) -> None:
    with pytest.raises(InvalidInput):
        classify_text(value)  # type: ignore[arg-type]


def test_a_credential_far_into_a_huge_text_is_still_found_quickly() -> None:
    filler = "the quick brown fox jumps over the lazy dog " * 4400  # ~198 000 characters
    text = filler + "my api key is sk-live-4f9a8b7c6d5e4f3a2b1c"
    assert len(text) < CREDENTIAL_SCAN_CHARS
    started = time.perf_counter()
    verdict = classify_text(text)
    assert verdict.level == "credential"
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize("offset", [4096 - 20, 4096 - 512 - 10, 2 * 3584 - 5, 3584 * 7 + 100])
def test_a_secret_straddling_a_scan_window_edge_is_found(offset: int) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    text = "a" * offset + " " + secret + " " + "b " * 9000
    assert classify_text(text).level == "credential"


def test_a_pem_key_cut_by_a_window_edge_is_found() -> None:
    text = "x " * 2030 + "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    assert classify_text(text).level == "credential"


def test_beyond_the_credential_bound_nothing_is_scanned_but_the_text_is_not_low() -> None:
    text = "z " * (CREDENTIAL_SCAN_CHARS // 2) + "my password is hunter2"
    verdict = classify_text(text)
    assert verdict.level == "high"
    assert any("too long" in reason for reason in verdict.reasons)


def test_personal_data_beyond_the_heuristic_bound_makes_the_text_high_anyway() -> None:
    text = "y " * HEURISTIC_SCAN_CHARS + "I have type 2 diabetes"
    verdict = classify_text(text)
    assert verdict.level == "high"
    assert "health information" not in verdict.reasons  # not read: judged by its size


@pytest.mark.parametrize(
    "text",
    [
        "1" * 200_000,
        "1 " * 100_000,
        "+1 " * 60_000,
        "a@" * 90_000,
        "a." * 90_000 + "@",
        "password is " * 15_000,
        "x" * 199_999 + "=",
        "-" * 200_000,
        "4" + "-" * 100_000 + "1",
    ],
)
def test_adversarial_shapes_take_bounded_time(text: str) -> None:
    started = time.perf_counter()
    classify_text(text)
    assert time.perf_counter() - started < 5.0


def test_normalise_keeps_newlines_and_joins_spaces() -> None:
    assert normalise("a\u00a0\u00a0b\n\tc\u200bd") == "a b\n cd"


def test_every_invisible_format_character_is_removed() -> None:
    import sys
    import unicodedata

    format_chars = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) == "Cf" and not 0xD800 <= code <= 0xDFFF
    ]
    assert normalise("x" + "".join(format_chars) + "y") == "xy"
