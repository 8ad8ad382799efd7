"""Phrasings written after the heuristics, to check that they generalise.

The first 30 were checked before any rule was changed for them: 22 right (low 10/10,
high 7/12, credential 5/8). The misses were whole categories (counselling and panic
attacks, anaphylaxis, "expecting a baby", "behind on payments", job loss, door codes,
``mysql -p...``, "login user / password"), which were then broadened. The 15 after them
were written next and checked once more: 11 right (divorce, being fired, an AWS secret key
with slashes and a bare "passcode 998877" missed); those categories were broadened too.
"""

from __future__ import annotations

import pytest

from pml.memory.sensitivity import classify_text

LOW = [
    "Please keep code reviews under 400 lines",
    "The Grafana dashboard for latency is called 'golden signals'",
    "I want answers in French when I write in French",
    "Our Kubernetes namespace is payments-staging",
    "Lint errors block the merge queue",
    "Use the rollback script in ops/rollback.sh after a failed deploy",
    "The weekly report goes out every Friday afternoon",
    "Favourite test framework: pytest with hypothesis",
    "The mobile app targets iOS 16 and Android 12",
    "Keep the changelog in reverse chronological order",
    "Our on-call rotation starts on Mondays",
    "The frontend uses React 18 with Vite",
    "Name new branches feature/<ticket>",
    "I like my terminal font at size 14",
    "The staging cluster has three nodes",
    "The histogram buckets are 0.0005, 0.001 and 0.0025 seconds",
    "Test blind SQL injection in the security review",
    "Our payments service talks to Stripe through a queue",
    "The refactor paid off: builds are twice as fast",
    "Class inheritance is preferred over mixins here",
    "Connect with postgresql://pml@db.internal:5432/pml on staging",
    "The C++ code uses std::vector everywhere",
]

HIGH = [
    "My daughter's teacher emails me at m.jones@school.edu",
    "I'm seeing a counsellor about my panic attacks",
    "I can't eat shellfish, I go into anaphylaxis",
    "We're behind on our car payments",
    "My landlord's phone is 020 7946 0958",
    "I was arrested in 2015 for a protest",
    "My partner and I are expecting a baby in May",
    "I'm a Jehovah's Witness",
    "My home is 42 Wallaby Way, Sydney",
    "I got laid off and I'm living on unemployment benefits",
    "The kids' pediatrician says Tom has asthma",
    "My passport expires next month",
    "My niece's birthday party is on the 12th",
    "I'm going through a divorce",
    "My therapist thinks I should take a break",
    "I was fired last month",
    "Send the invoice to 17 Elm Road, Leeds LS6 2AB",
]

CREDENTIAL = [
    "the root password on the NAS is Pa55word",
    "export ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnop1234",
    "door code is 4417",
    "Here's my npm token npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "mysql -u root -pS3cretPw",
    "The webhook secret is whsec_9f8e7d6c5b4a",
    "use the login admin / Admin!2024 for the router",
    "my gmail app password: abcd efgh ijkl mnop",
    "the garage code is 2580",
    "ssh key passphrase: kumquat-77",
    "AWS secret access key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "Remember the VPN shared secret: Gr33nTea",
    "my online banking login is 123456 and passcode 998877",
    "psql --password=Winter2025 -h db",
]


@pytest.mark.parametrize("text", LOW)
def test_unseen_project_facts_are_low(text: str) -> None:
    assert classify_text(text).level == "low", classify_text(text)


@pytest.mark.parametrize("text", HIGH)
def test_unseen_personal_data_is_high(text: str) -> None:
    assert classify_text(text).level == "high", classify_text(text)


@pytest.mark.parametrize("text", CREDENTIAL)
def test_unseen_credentials_are_credential(text: str) -> None:
    assert classify_text(text).level == "credential", classify_text(text)
