"""A second development set for the sensitivity heuristics: the phrasings rules were tuned on.

Written after the held-out set (``test_sensitivity_heldout.py``) and before the rework of
``pml.memory.sensitivity`` and ``pml.memory.personal_data``; every rule added in that
rework was written for a family of phrasings here (stems, shapes, word order), not for one
sentence. Every phrasing here must be classified right.

The entries marked "round 2" were added after the held-out set's blind score, for the
families it showed missing (chronic conditions, foreign national ids, court dates,
biometrics, separation, webhook URLs, private key blocks, "it's" as a link, "user X pass
Y"); they are new sentences, not the held-out ones.
"""

from __future__ import annotations

import time

import pytest

from pml.memory.sensitivity import classify_text

LOW = [
    "The /metrics endpoint exposes request counts",
    "Never log the password field",
    "The secrets manager rotates DB creds every 90 days",
    "our app stores the hashed PIN, never the raw one",
    "API keys go in the X-Api-Key header",
    "Remember we use Terraform for infrastructure",
    "The billing service computes VAT per country",
    "Add a unit test for the mortgage calculator rounding",
    "The clinic scheduling module has no owner yet",
    "The date of birth input uses a date picker",
    "The users table has email and phone columns",
    "Access tokens expire after 1 hour and refresh tokens after 30 days",
    "Remember that the SSH port on the bastion is 2222",
    "Ping me on Slack rather than by email",
    "I prefer tea over coffee",
    "I work remotely on Fridays",
    "The weekly sync is on Wednesdays at 14:00",
    "Avoid the word 'simply' in docs",
    "The service account is called svc-deploy",
    "Password fields need a show/hide toggle",
    "The seed script populates 100 fake users",
    "The account recovery flow sends a magic link",
    "Keep the insurance quote API behind a feature flag",
    "Don't commit the .env file",
    "The secret sauce of our ranking is BM25 plus embeddings",
    "Le serveur de préproduction s'appelle gamma",
    "Usa siempre comillas dobles en el código",
    "Die Tests laufen mit pytest",
    "My keyboard layout is Colemak",
    "The banking app release is planned for Q3",
    "The bank statement parser handles CSV and OFX",
    "Credit card fields are tokenised by Stripe Elements",
    "the key for the greeting in the translation file is greeting.hello",
    "The salary field in the HR demo is a decimal",
    "Tax rates are loaded from config/tax_rates.yaml",
    "The therapy-notes feature is out of scope for v1",
    "Use the visa and mastercard icons from the design kit",
    "The passport.js strategy for Google is configured in auth.ts",
    "the patient id column is a UUID",
    "Store the court case numbers as strings, they have letters",
    # built to trip the rules of the rework: each must stay low
    "We weighed the options and picked Postgres",
    "The free trial period ends after 14 days",
    "Use a genetic algorithm for the scheduler",
    "The battery was charged with USB-C during the demo",
    "Stating the obvious in docs is fine",
    "The animation stutters on older Android phones",
    "Add visual aids to the onboarding guide",
    "Queries go through Apache Hive",
    "The random seed is 42",
    "The seed users are alice bob carol dave erin frank",
    "We vote on RFCs every Thursday",
    "We're transitioning the service to Kubernetes",
    "We're separating concerns between the API and the worker",
    "Our child processes are named worker-1 to worker-8",
    "The key for the cache is user:{id}",
    "The code for the side panel is in ui/panel.tsx",
    "Error code 4031 means the quota is exhausted",
    "The door sensor integration reports every 30 s",
    "the safe default is 3 retries",
    "We lost 3 customers after the outage",
    "We make 200 requests per second at peak",
    "We have 10k users in the beta",
    "The token is rotated every 24 hours",
    "The password must be at least 12 characters",
    "The PIN pad component needs an aria label",
    "The API key lives in the PML_KEY environment variable",
    "login page: /auth/login, password reset page: /auth/reset",
    "The recovery phrase screen is shown once at signup",
    "Our origins header allows *.example.com",
    "Gradient descent converges after 30 epochs",
    "I'm conservative about adding dependencies",
    "The insurance field is optional on the form",
    "I'm building a budget tracker app for fun",
    # round 2 guards
    "The build passes on CI now",
    "Tests pass when run with -p no:cacheplugin",
    "The webhook endpoint is https://api.example.com/hooks/github",
    "Pagination uses ?page=2&per_page=50",
    "I'm half way through the refactor",
    "The court booking service is half finished",
    "The keys are split up by region in the config",
    "user tests pass on CI again",
]

HIGH = [
    # health
    "I've been struggling with depression since my dad died",
    "I have a pacemaker",
    "I was diagnosed with long covid",
    "I'm in recovery from alcohol addiction",
    "I'm on blood thinners",
    "I had knee surgery in March",
    "I've got tinnitus in my left ear",
    "My psychiatrist changed my meds",
    "I get really bad migraines",
    "I have high blood pressure",
    "Tengo ansiedad y tomo medicación",
    "Ich habe Diabetes Typ 1",
    "I'm 4 months pregnant",
    "My cholesterol is 6.2",
    "I'm 1.80 m tall and weigh 80 kg",
    # finance
    "I make 140 grand a year",
    "We still owe 210k on the house",
    "My rent is 1,450 a month",
    "I have about 30k in savings",
    "Mon salaire est de 3 200 euros nets",
    "I'm drowning in credit card debt",
    "I got a pay rise to 70k",
    "My gross pay is 4,800 per month",
    "Mi sueldo es de 2.000 euros",
    # ids
    "my NI number is AB123456C",
    "Passport: 925076473, expires 2031",
    "My tax file number is 123 456 782",
    "my social is 219-09-9999",
    "Meine Steuer-ID ist 12 345 678 901",
    "my personal ID number is 850101-1234",
    "My licence number is MORGA753116SM9IJ",
    "my ID card number is CA1234567",
    # contacts
    "Text my brother on 07911 123456",
    "Mike's cell: (212) 555-0199",
    "my doctor's office line is 617-555-0112",
    "Le portable de ma mère est le 06 98 76 54 32",
    # location
    "We're at 4 Elm Close, Bristol BS8 1AB",
    "I live in Hackney, near London Fields",
    "Our holiday home is at 3 Chemin des Vignes",
    "The kids' school is on Maple Avenue",
    "I'm staying at the Hilton, room 512",
    "Wir wohnen in der Lindenstraße 8",
    # family and children
    "My kids are 4 and 9",
    "My daughter's name is Lily and she's in year 2",
    "My son is 11 and starts secondary school in September",
    # religion, politics, orientation, ethnicity
    "I'm Jewish and keep kosher",
    "I go to mass every Sunday",
    "I always vote Conservative",
    "I'm a lesbian",
    "I'm non-binary and use they/them",
    "I'm of Pakistani descent",
    "I'm mixed race",
    "My husband and I are both men",
    "I'm a Sunni Muslim",
    "I'm transitioning",
    # legal and criminal
    "I have a DUI from 2018",
    "I'm being sued by my former employer",
    "I was charged with assault in 2012",
    "I have a hearing at the magistrates' court on Friday",
    "My lawyer says the trial starts in May",
    # biometrics and genetics
    "My DNA test says I'm 30% Scandinavian",
    "I enrolled my iris scan at the airport",
    "Save my fingerprint template for the door",
    # immigration
    "I'm applying for a residence permit",
    "My visa was refused last year",
    "I'm undocumented",
    "I'm a refugee from Eritrea",
    "I hold a skilled worker visa",
    # circumstances
    "My father passed away last month",
    "We're getting a divorce",
    # round 2: families the held-out set showed missing (fresh phrasings, not its own)
    "I've had chronic sinusitis for years",
    "My mum suffers from hay fever every spring",
    "I've got constant neck pain from an old injury at work",
    "My after-tax income is about 2,600 a month",
    "My year-end bonus was 9k",
    "Mi NIE es X1234567L",
    "my PESEL is 44051401359",
    "Meu CPF é 123.456.789-09",
    "Her SIN: 130 692 544",
    "My dad is half Korean",
    "She's half Italian, half Brazilian",
    "I have to appear in court on Monday",
    "I got a summons for unpaid parking fines",
    "Enrol my voice print for phone banking",
    "My facial scan is on file at the gym",
    "My husband and I split up last month",
    "I'm separated from my wife",
    "My partner and I are breaking up",
]

CREDENTIAL = [
    "remember the wifi password is purpleRain",
    "wifi: network HomeNet, password 7g8h9j0k",
    "my ATM pin is 7301",
    "the code for the side door is 2255",
    "the keypad combo is 8-8-1-2",
    "the lockbox combination is 4-1-9",
    "alarm disarm code: 0906",
    "my Gmail password is Tulip$2023",
    "GitLab token glpat-xYz12AbCdEfGhIjKlMn0",
    "OpenAI key sk-abc123def456ghi789jkl012mno345pqr",
    "Here's the PEM: -----BEGIN EC PRIVATE KEY----- MHcCAQEEIOabc",
    "my ledger seed: legal winner thank year wave sausage worth useful legal winner thank",
    "the 12 words are: army van defense carry jealous true garbage claim echo media make",
    "backup code 4821-9034",
    "my recovery key is 8F3K-2M9Q-7X1Z-4B6T",
    "postgresql://reporter:R3p0rt!ng@10.0.0.5/analytics",
    "amqp://guest:S3cretRabbit@mq.local:5672",
    "jdbc:mysql://db:3306/app?user=root&password=hunter22",
    "DB_PASSWORD=Q9w8e7r6",
    "the admin login is root, password toor",
    "my bank password is MapleLeaf88",
    "Mot de passe du wifi : chaton2022",
    "La clave del wifi es perro1234",
    "Mein Passwort ist Apfelbaum7",
    "PIN: 9914",
    "the token for the CI bot is ci_tok_7f6e5d4c3b2a1908",
    "AWS_SECRET_ACCESS_KEY = abcdEFGHijklMNOPqrstUVWXyz0123456789ABCD",
    "my SSH private key passphrase is 'orange-kettle-92'",
    "the Discord bot token is MTA0NjY5.GxYz12.AbCdEfGhIjKlMnOpQrStUvWxYz",
    "my TOTP seed is KRSXG5CTMVRXEZLU",
    "the vault unseal key is 3Fh8k2Lm9Qp4Rt6Vx1Zc7Nb5",
    "Le code du portail est 1234B",
    "Der Türcode ist 4711",
    "El PIN de mi tarjeta es 5590",
    "wifi key is 'correct horse battery staple'",
    "The building entry code? 7734",
    "One-time backup codes for GitHub: 1a2b3-c4d5e 6f7g8-h9i0j",
    # round 2: families the held-out set showed missing (fresh phrasings, not its own)
    "Discord webhook: https://discord.com/api/webhooks/1234567890/AbCdEfGhIjKlMnOpQrStUvWx",
    "alerts go to https://hooks.slack.com/services/T00000000/B11111111/AbCdEfGhIjKlMnOp",
    "the feed URL is https://example.com/feed?token=9f8e7d6c5b4a39281706",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\nlQVYBFxyz0EBDAC7",
    "PuTTY-User-Key-File-3: ssh-ed25519\nPrivate-Lines: 1\nAAAAIGq3",
    "Unser WLAN-Passwort heißt Sommerwind77",
    "my netflix password, it's Kettle99",
    "Password: it is Bramble42",
    "gym account: member 4411, pass Squash2024",
    "Spotify user ben.t pass Orange77",
]


@pytest.mark.parametrize("text", LOW)
def test_dev2_project_facts_and_software_phrases_are_low(text: str) -> None:
    assert classify_text(text).level == "low", classify_text(text)


@pytest.mark.parametrize("text", HIGH)
def test_dev2_personal_data_is_high(text: str) -> None:
    assert classify_text(text).level == "high", classify_text(text)


@pytest.mark.parametrize("text", CREDENTIAL)
def test_dev2_credentials_are_credential(text: str) -> None:
    assert classify_text(text).level == "credential", classify_text(text)


def test_dev2_is_as_broad_as_promised_and_new() -> None:
    from test_sensitivity import CREDENTIAL as DEV_CREDENTIAL
    from test_sensitivity import HIGH as DEV_HIGH
    from test_sensitivity import LOW as DEV_LOW
    from test_sensitivity_heldout import CREDENTIAL as HELD_CREDENTIAL
    from test_sensitivity_heldout import HIGH as HELD_HIGH
    from test_sensitivity_heldout import LOW as HELD_LOW

    mine = LOW + HIGH + CREDENTIAL
    assert len(mine) >= 60
    assert len(set(mine)) == len(mine)
    others = DEV_LOW + DEV_HIGH + DEV_CREDENTIAL + HELD_LOW + HELD_HIGH + HELD_CREDENTIAL
    assert not set(mine) & set(others)


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("the diagnosis column is nullable", "low"),
        ("my diagnosis came back clear", "high"),
        ("Anna's diagnosis field is empty", "high"),  # a person owns it
        ("customer addresses are geocoded nightly", "low"),
        ("my address changed last week", "high"),
        ("Tax brackets are read from config/tax_brackets.yaml", "low"),
        ("I keep my tax returns in taxes/2023.pdf", "high"),  # code, but it names a person
        ("`salary` is a decimal in the payroll schema", "low"),
    ],
)
def test_a_sensitive_word_that_only_names_software_is_low(text: str, level: str) -> None:
    assert classify_text(text).level == level, classify_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "Je prends des médicaments pour le cœur",
        "JE PRENDS DES MÉDICAMENTS",
        "Tengo una cita con el psicólogo",
        "Ich bin schwanger",
        "ｍｙ ｓｏｎ ｉｓ ７",  # fullwidth
        "My daugh\u200bter is 9",  # a zero-width space inside the word
    ],
)
def test_accents_case_and_width_do_not_hide_personal_words(text: str) -> None:
    assert classify_text(text).level == "high", classify_text(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("My kids are 4 and 9", "information about a child"),
        ("the code for the side door is 2255", "an access code (door, alarm, safe, keypad)"),
        ("seed: legal winner thank year wave sausage worth", "a recovery phrase or backup codes"),
        ("I was charged with assault in 2012", "a criminal record or legal matter"),
        ("I'm applying for a residence permit", "ethnic origin or immigration status"),
        ("My DNA test says I'm 30% Scandinavian", "biometric or genetic data"),
    ],
)
def test_new_families_give_a_short_reason(text: str, reason: str) -> None:
    assert reason in classify_text(text).reasons, classify_text(text)


@pytest.mark.parametrize(
    "code",
    ["2255", "8-8-1-2", "4b127", "1234B", "12-34-56"],
)
def test_access_codes_take_the_shapes_keypads_use(code: str) -> None:
    assert classify_text(f"the gate code is {code}").level == "credential"


@pytest.mark.parametrize(
    "text",
    [
        "the gate code is 12",  # too short to open anything
        "the gate code is abcdef",
        "the gate code changes every month",
        "the door code is 4 digits long",
        "seed: run the fixtures before the tests",  # a sentence, not a word list
    ],
)
def test_what_is_not_an_access_code_or_a_seed(text: str) -> None:
    assert classify_text(text).level != "credential", classify_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "1-" * 10_000,
        "1 " * 10_000,
        "x's " * 5_000,
        "my son " * 2_850,
        "tax module " * 1_800,
        "door code is x " * 1_330,
        "code for the the the door " * 760,
        "seed: abc def ghi jkl mno " * 770,
        "user x, password " * 1_170,
        "0 12 " * 4_000,
        "é" * 20_000,
        "\u0301" * 20_000,  # combining marks only
        "hooks.slack.com/services/" + "a/" * 9_980,
        "putty-user-key-file-2: x\n" * 800,
        "-----begin " * 1_800,
        "my wife and i are " * 1_100,
        "i'm half " * 2_200,
        "abcdefghitis " * 1_530,
        "user a b pass " * 1_420,
    ],
)
def test_adversarial_text_for_the_new_rules_takes_bounded_time(text: str) -> None:
    started = time.perf_counter()
    classify_text(text[:20_000])
    assert time.perf_counter() - started < 1.0  # ~50 ms measured; generous for slow CI
