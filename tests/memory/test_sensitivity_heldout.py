"""Held-out sets for the sensitivity heuristics: phrasings nobody tuned a rule on.

Set 1 (``LOW``, ``HIGH``, ``CREDENTIAL``) was written in one sitting before the heuristics
were reworked, and scored by the classifier of the time:
before: low 37/42 (88%), high 35/51 (69%), credential 20/32 (62%).
The rules were then tuned on ``test_sensitivity_dev2.py`` only; a rule that only the
misses of that first scoring suggested was left out. Scored once more, blind:
after: low 42/42 (100%), high 42/51 (82%), credential 27/32 (84%).
Misses then: "chronic back pain", "take-home pay" (the hyphen), a Spanish DNI and a
Canadian SIN, "half Nigerian, half Irish", "a court date", a voiceprint and a facial
recognition template, "my wife and I are separating"; a Slack webhook URL, a PGP private
key block, "lautet" (German "is"), "password? it's X", and "user X pass Y".

One second round followed, on those families (new phrasings for them in dev2, not these
sentences), so set 1 is no longer blind: after round 2: low 42/42, high 51/51,
credential 32/32. Set 2 (``*_2``) was written after round 2 and scored once, blind:
low 12/13 (92%), high 16/20 (80%), credential 10/13 (77%); nothing was tuned on it.
Its misses: "the medical device firmware team" (high), "I'm bi", "zuckerkrank" (a
compound), "my flat is 3B, 27 Harbour View" (no street word), "the pill" without "on";
a safe that "opens with 24-7-13", "backup codes —" (a dash as the link), and
"the login for the CMS is editor / Ed1t0r!!".

The tests assert a floor per level, a little below the score reached, so that a change
which makes the heuristics generalise worse fails; single misses are listed, not asserted.
"""

from __future__ import annotations

import pytest

from pml.memory.sensitivity import classify_text

# Preferences, habits, project facts; and software phrases that only look sensitive.
LOW = [
    "remember I prefer dark mode",
    "remember our API uses snake_case",
    "The health endpoint returns 200 when the database is reachable",
    "rotate the api key monthly",
    "password reset flow uses email links",
    "store card brand logos in /assets",
    "the ssn column is encrypted at rest",
    "Secrets live in Vault under kv/prod, never in the repo",
    "Remember that the staging DB password is kept in 1Password, not in .env",
    "The token refresh job runs every 15 minutes",
    "The checkout page must only ever show the last four digits of a card",
    "remember to use pytest -x when debugging",
    "I like my coffee black, no sugar",
    "Keep answers short; no bullet lists unless I ask for them",
    "No deploys on bank holidays",
    "The address field on the signup form is optional",
    "We store user birthdays as ISO dates in the profiles table",
    "The patient-records service is owned by team Atlas",
    "Run the tax calculation module tests before every release",
    "The PIN entry screen needs a bigger font",
    "Use libphonenumber to validate phone numbers",
    "remember that the default branch is main",
    "I'm in the Europe/Paris timezone",
    "The ORM maps the Address model to the addresses table",
    "Encrypt private key files with age before backing them up",
    "Our SLA promises 99.9% uptime",
    "Remember: every PR needs two approvals",
    "The loan calculator widget rounds to two decimals",
    "The CI secret named DEPLOY_KEY is set at the org level",
    "Recuerda que prefiero las respuestas en español",
    "Merci de toujours vouvoyer les clients dans les e-mails",
    "Bitte verwende immer deutsche Anführungszeichen",
    "The medication reminder app's backend is written in Go",
    "The gender field accepts free text",
    "I take the 8:10 train to work most days",
    "My favourite pizza topping is mushrooms",
    "The README should explain the 2FA setup steps",
    "remember the office guest wifi network is called AcmeGuest",
    "Default session timeout is 30 minutes",
    "The deploy key is read-only",
    "Users can't change their password more than once a day",
    "Ask before running database migrations in production",
]

# Personal data and sensitive categories: what a person should consent to.
HIGH = [
    # health
    "remember my blood type is O negative",
    "remember I'm seeing a therapist on Tuesdays",
    "I've got a peanut allergy, so no satay places",
    "I was hospitalised with pneumonia in January",
    "My doctor upped my lithium dose",
    "I suffer from chronic back pain",
    "I'm HIV positive",
    "remember I'm lactose intolerant",
    "I have an appointment with the oncologist next week",
    "I weigh 95 kg and I'm trying to lose 10",
    "I'm pregnant, so please don't suggest wine pairings",
    "Me diagnosticaron diabetes el año pasado",
    "Je prends des antidépresseurs depuis mars",
    # finance
    "remember my salary is 85k",
    "We're two months behind on the rent",
    "My take-home pay is about 3,100 a month",
    "I've got 12k sitting on my credit card",
    "I filed for bankruptcy in 2019",
    "Mein Gehalt liegt bei 62.000 Euro brutto",
    # ids and cards
    "remember my card number is 4532 0151 1283 0366",
    "My passport no. is 533380006",
    "my driver's license number is D1234-56789-01234",
    "My NHS number is 943 476 5919",
    "Mi DNI es 12345678Z",
    "my SIN is 046 454 286",
    # contacts
    "My sister's mobile is 06 12 34 56 78",
    "remember Dave's number: 415-555-0134",
    "My mum's email is margaret.h@btinternet.com",
    "email my accountant at r.patel@patel-accounts.co.uk",
    # location
    "remember that my son's school is St Mary's on 12 Oak Road",
    "We moved to 88 Queen St, Apt 4B, Toronto",
    "My postcode is SW1A 1AA",
    "J'habite au 5 rue des Lilas à Lyon",
    # family and children
    "My daughter Emma is 7 and goes to Riverside Primary",
    "My kid was born on 3 May 2016",
    "My son has just been diagnosed with dyslexia",
    # religion, politics, orientation, ethnicity
    "I'm a practising Catholic and don't work on Sundays",
    "I'm a registered Democrat",
    "My girlfriend and I are both women",
    "I'm trans and use she/her pronouns",
    "I fast during Ramadan",
    "I'm half Nigerian, half Irish",
    # legal and criminal
    "I have a court date next month for a speeding charge",
    "I spent two years in prison",
    "I'm on probation until 2026",
    # biometrics
    "Use my voiceprint to verify me on support calls",
    "My facial recognition template was enrolled at HR yesterday",
    # immigration
    "My work visa expires in March and I'm still waiting on my green card",
    "I came here as an asylum seeker from Syria",
    "I'm on a tourist visa that runs out in June",
    # circumstances
    "My wife and I are separating",
]

# Secrets: never stored, whatever anyone says.
CREDENTIAL = [
    "remember my AWS secret is Kx9/aT2bQ8+eR4mN7pL1sV6wY3zC5dF0gH8jJ2kL",
    "remember the wifi password is bluebird42",
    "wi-fi key: sunflower-meadow",
    "My phone PIN is 2468",
    "the alarm code for the office is 1-9-8-4",
    "gate code 3321#",
    "Our GitHub PAT: ghp_R2d2C3poBb8Ee9Ff0Gg1Hh2Ii3Jj4Kk5Ll6M",
    "The Slack webhook is https://hooks.slack.com/services/T0123ABCD/B0456EFGH/xYz1234567890abcdefGHIJ",
    "seed phrase: witch collapse practice feed shame open despair creek road again ice least",
    "my metamask recovery words are gravity pumpkin orbit lemon shy tiger rural",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGQ0u3ABCAC9x7\n"
    "-----END PGP PRIVATE KEY BLOCK-----",
    "here is my ssh key -----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAABG5vbmU=",
    "2FA backup codes: 8392 1047, 5521 9934, 7710 2283",
    "redis://:Sup3rS3cret@cache.internal:6379/0",
    "Server=db1;Database=crm;User Id=sa;Password=Passw0rd!;",
    "mongodb+srv://app:Xk29fLq@cluster0.mongodb.net/prod",
    "my login for the router is admin and the password is letmein",
    "PW for the shared drive = Kangaroo!77",
    "the token is 9a8b7c6d5e4f3a2b1c0d",
    "Mi contraseña del correo es Gato2024",
    "Le code de la porte d'entrée est 4B127",
    "Das WLAN-Passwort lautet Sonnenblume99",
    "bank app passcode 551903",
    "my Apple ID password? it's Rainbow-Falls-19",
    "the secret key for signing cookies is 'f3b9c2e1d0a7b6c5'",
    "Twilio auth token 5f4dcc3b5aa765d61d8327deb882cf99",
    "use sk_test_4eC39HqLyjWDarjtT1zdp7dc for stripe",
    "heroku api key: 01234567-89ab-cdef-0123-456789abcdef",
    "the safe combination is 12-34-56",
    "TOTP secret JBSWY3DPEHPK3PXP",
    "our root pw is changeme123",
    "Netflix: user kate@example.com pass Bl00mfield",
]

# Set 2: written after the second round of rules, scored once.
LOW_2 = [
    "remember we deploy from the release branch only",
    "I like variable names in English even when we talk in French",
    "The metrics retention is 15 days",
    "remember the staging api key is in the team vault",
    "Our CI uses a GitHub token with read-only scope",
    "The customer's address is validated by the geocoder service",
    "remember that Postgres runs in UTC",
    "Tabs for Makefiles, spaces everywhere else",
    "The medical device firmware team uses Zephyr",
    "Retry failed payments three times before emailing the customer",
    "Rappelle-toi que les tests d'intégration sont lents",
    "Recuerda: el despliegue es los viernes",
    "Wir nutzen Poetry statt pip",
]
HIGH_2 = [
    "remember my blood group is A+",
    "remember I'm allergic to latex",
    "I had a panic attack at work last week",
    "remember my husband's birthday is 2 October",
    "My pension pot is around 40k",
    "I'm paying off a 15k car loan",
    "I'm in therapy for OCD",
    "My son's nursery is Little Acorns on Church Lane",
    "remember my IBAN: GB33BUKB20201555555555",
    "my ex has a restraining order against him",
    "I'm Hindu and vegetarian for religious reasons",
    "I'm bi and my family doesn't know",
    "I was deported from the US in 2018",
    "Mi hija tiene 5 años",
    "Ma mère a la maladie d'Alzheimer",
    "Ich bin zuckerkrank",
    "remember my flat is 3B, 27 Harbour View, Cork",
    "I take the pill every morning at 8",
    "my credit card PIN is the same as my phone PIN",
    "I'm on a payment plan with the tax office",
]
CREDENTIAL_2 = [
    "remember the wifi password is Lighthouse_2024",
    "my card's PIN is 7788",
    "the alarm code is 5-5-9-1",
    "remember my AWS secret access key is h7Gx9/Lm2Qp4Rt6Vx1Zc7Nb5Kd8Fj3Hs0Wq2Ey5T",
    "here is the private key for the deploy user: -----BEGIN RSA PRIVATE KEY----- MIIEpA",
    "our Datadog API key: 3f8a9c2d1e7b6a5f4c3d2e1f0a9b8c7d",
    "remember my bitcoin seed: canyon lizard oyster ripple fossil velvet tunnel",
    "postgres password for prod is Tr1cky#Pass",
    "the safe in the office opens with 24-7-13",
    "backup codes — 1029 3847, 5647 3829",
    "Remember: my Outlook password = Bluebell88",
    "le mot de passe est Chocolat42",
    "the login for the CMS is editor / Ed1t0r!!",
]

# The least share of each level classified right (the score reached, less a margin).
FLOORS = {"low": 0.95, "high": 0.95, "credential": 0.93}
FLOORS_2 = {"low": 0.9, "high": 0.75, "credential": 0.75}


def _misses(level: str, texts: list[str]) -> list[tuple[str, str]]:
    return [
        (text, verdict.level) for text in texts if (verdict := classify_text(text)).level != level
    ]


def test_the_held_out_sets_are_as_broad_as_promised() -> None:
    assert (len(LOW), len(HIGH), len(CREDENTIAL)) >= (40, 50, 30)
    everything = LOW + HIGH + CREDENTIAL + LOW_2 + HIGH_2 + CREDENTIAL_2
    assert len(set(everything)) == len(everything)


@pytest.mark.parametrize(
    ("floors", "sets"),
    [
        (FLOORS, {"low": LOW, "high": HIGH, "credential": CREDENTIAL}),
        (FLOORS_2, {"low": LOW_2, "high": HIGH_2, "credential": CREDENTIAL_2}),
    ],
    ids=["set 1", "set 2"],
)
def test_each_level_reaches_its_floor_on_the_held_out_sets(
    floors: dict[str, float], sets: dict[str, list[str]]
) -> None:
    for level, texts in sets.items():
        misses = _misses(level, texts)
        score = 1 - len(misses) / len(texts)
        assert score >= floors[level], (level, f"{score:.0%}", misses)
