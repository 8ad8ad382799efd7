"""Secrets that reach a credential through a container, a loop, a name in another language,
or as hex key material passed by position are lifted; what never becomes a credential keeps
its constant."""

from __future__ import annotations

import ast

import pytest

from pml.analysis.bindings import CREDENTIAL_ALIAS
from pml.analysis.credential_flow import mark_credential_aliases
from pml.analysis.secret_check import find_secret
from pml.analysis.snippet import analyze_snippet
from pml.policy.scrub import scrub

SECRET = "Zq8kLm2pXr5v"  # neither random-looking enough nor shaped like a token alone
HEX_KEY = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def lifted(code: str) -> tuple[str, list[str]]:
    analysis = analyze_snippet(code)
    return analysis.lifted_code, sorted(p.name for p in analysis.parameters)


def assert_lifted(code: str, parameter: str, secret: str = SECRET) -> str:
    stored, parameters = lifted(code)
    assert secret not in stored
    assert parameter in parameters
    assert find_secret(stored) is None
    return stored


@pytest.mark.parametrize(
    ("code", "parameter"),
    [
        (
            f'vals = ["ada", "{SECRET}"]\nuser, password = vals\nreturn login(user, password)',
            "password",
        ),
        (
            f'vals = ("ada", "x", "{SECRET}")\nuser, *rest, pw = vals\nreturn login(password=pw)',
            "password",
        ),
        (
            f'c = {{"u": "ada", "p": "{SECRET}"}}\nreturn await mcp.db.connect(password=c["p"])',
            "password",
        ),
        (
            f'c = {{"p": "{SECRET}"}}\nreturn await mcp.db.connect(password=c.get("p", ""))',
            "password",
        ),
        (
            f'keys = ["{SECRET}"]\nreturn await mcp.api.get(url="https://x", api_key=keys[0])',
            "api_key",
        ),
        (f'keys = ["a", "{SECRET}"]\nreturn call(token=keys[-1])', "token"),
        (f'pair = ("ada", "{SECRET}")\nreturn login(user=pair[0], password=pair[1])', "password"),
        (
            f'cfg = {{"db": {{"auth": ["{SECRET}"]}}}}\nreturn call(password=cfg["db"]["auth"][0])',
            "password",
        ),
        (f'for pw in ["{SECRET}"]:\n    return login(password=pw)', "password"),
        (f'vals = ["{SECRET}"]\nfor v in vals:\n    return login(password=v)', "password"),
        (f'return [login(password=p) for p in ["{SECRET}"]]', "password"),
        (
            f'pairs = [("ada", "{SECRET}")]\n'
            "for u, p in pairs:\n    login(user=u, password=p)\nreturn 1",
            "password",
        ),
        (f'd = {{}}\nd["p"] = "{SECRET}"\nreturn login(password=d["p"])', "password"),
        (f'ks = []\nks.append("{SECRET}")\nreturn login(password=ks[0])', "password"),
        (f'a = ["{SECRET}"]\nb = a\nc = b\nreturn login(password=c[0])', "password"),
        (
            f'x = "{SECRET}"\nvals = [x]\nreturn {{"Authorization": f"Bearer {{vals[0]}}"}}',
            "authorization",
        ),
        (f'i = 0\nkeys = ["{SECRET}"]\nreturn login(password=keys[i])', "password"),
    ],
)
def test_a_constant_in_a_container_that_becomes_a_credential_is_lifted(
    code: str, parameter: str
) -> None:
    assert_lifted(code, parameter)


@pytest.mark.parametrize(
    ("code", "kept"),
    [
        (f'vals = ["ada", "{SECRET}"]\nuser, password = vals\nreturn login(user, password)', "ada"),
        (
            f'c = {{"host": "db.internal", "p": "{SECRET}"}}\n'
            'return await mcp.db.connect(host=c["host"], password=c["p"])',
            "db.internal",
        ),
        (f'keys = ["first-label", "{SECRET}"]\nreturn call(token=keys[1])', "first-label"),
        (f'x = "{SECRET}"\nreturn call(token=x.replace("-", "_"))', "-"),
        (f'x = "{SECRET}"\nreturn call(token=x.encode("utf-8"))', "utf-8"),
        (f'x = "{SECRET}"\nreturn call(token=":".join(["ada", x]))', "ada"),
        (f'x = "{SECRET}"\nreturn call(token="Bearer {{}}".format(x))', "Bearer {}"),
    ],
)
def test_the_other_elements_keep_their_constants(code: str, kept: str) -> None:
    stored, _ = lifted(code)
    assert SECRET not in stored
    assert f'"{kept}"' in stored


@pytest.mark.parametrize(
    "code",
    [
        'names = ["ada", "bob"]\nfor n in names:\n    greet(n)\nreturn 1',
        'cfg = {"path": "/tmp/report.csv", "mode": "r"}\nreturn open_file(path=cfg["path"])',
        'rows = [("a", 1), ("b", 2)]\nreturn {k: v for k, v in rows}',
        'd = {}\nd["greeting"] = "hello there"\nreturn d["greeting"]',
        'parts = ["x", "y"]\nreturn "-".join(parts)',
    ],
)
def test_containers_that_never_reach_a_credential_are_unchanged(code: str) -> None:
    stored, parameters = lifted(code)
    assert stored == code
    assert parameters == []


def test_only_the_element_used_is_marked() -> None:
    tree = ast.parse(f'vals = ["ada", "{SECRET}", "x"]\nuser, password, z = vals')
    mark_credential_aliases(tree)
    assigned = tree.body[0]
    assert isinstance(assigned, ast.Assign)
    assert isinstance(assigned.value, ast.List)
    marks = [getattr(element, CREDENTIAL_ALIAS, None) for element in assigned.value.elts]
    assert marks == [None, "password", None]


@pytest.mark.parametrize(
    ("name", "parameter"),
    [
        ("mot_de_passe", "mot_de_passe"),
        ("motDePasse", "mot_de_passe"),
        ("contraseña", "contrasena"),
        ("Passwort", "passwort"),
        ("senha_db", "senha_db"),
        ("wachtwoord", "wachtwoord"),
        ("şifre", "sifre"),
        ("пароль", "пароль"),
        ("用户密码", "用户密码"),
        ("パスワード", "パスワード"),
        ("비밀번호", "비밀번호"),
    ],
)
def test_credential_names_in_other_languages_are_read(name: str, parameter: str) -> None:
    assert_lifted(f'{name} = "{SECRET}"\nreturn connect({name})', parameter)
    assert_lifted(f'return connect(**{{"{name}": "{SECRET}"}})', parameter)
    assert scrub({name: SECRET}) != {name: SECRET}  # the audit hides it too


@pytest.mark.parametrize("name", ["mot", "passe", "naïve", "clé_primaire", "名前", "число"])
def test_other_words_in_other_languages_are_not_credentials(name: str) -> None:
    code = f'{name} = "{SECRET}"\nreturn connect({name})'
    assert lifted(code) == (code, [])


@pytest.mark.parametrize(
    "code",
    [
        f'return sign("{HEX_KEY}", payload)',
        f'acct = Account.from_key("0x{HEX_KEY}")\nreturn acct.address',
        f'key = SigningKey(bytes.fromhex("{HEX_KEY}"))\nreturn key',
        f'return hmac.new(bytes.fromhex("{HEX_KEY}"), msg, "sha256").hexdigest()',
        f'return wallet.unlock(binascii.unhexlify("{HEX_KEY[:32]}"))',
    ],
)
def test_hex_key_material_passed_by_position_is_lifted(code: str) -> None:
    assert_lifted(code, "private_key", secret=HEX_KEY[:32])


@pytest.mark.parametrize(
    "code",
    [
        f'return hashlib.sha256(data).hexdigest() == "{HEX_KEY}"',
        f'return verify_checksum("{HEX_KEY}", data)',
        f'return fetch_blob("{HEX_KEY}")',
        'return sign("12345678901234567890123456789012345678", payload)',
        'return sign("short-hex-abc123", payload)',
    ],
)
def test_hashes_and_plain_arguments_keep_their_constants(code: str) -> None:
    assert lifted(code) == (code, [])


@pytest.mark.parametrize(
    ("code", "stays"),
    [
        # cycles between containers: the secret is in neither element the credential reads
        (f'a = [b[0]]\nb = [a[0], "{SECRET}"]\nreturn login(password=a[0])', True),
        ("a = b\nb = a\nreturn login(password=a" + "[0]" * 30 + ")", False),
        # nesting deeper than is followed: the element that deep is taken whole
        (
            "c = "
            + "[" * 40
            + f'"{SECRET}"'
            + "]" * 40
            + "\nreturn f(password=c"
            + "[0]" * 40
            + ")",
            False,
        ),
        (f'c = [[["x", "{SECRET}"]]]\nreturn f(password=c[0][0])', False),
        # a loop that unpacks more names than the values hold
        (f'for a, b, c in [("{SECRET}",)]:\n    login(password=c)\nreturn 1', True),
        # keys of every kind, and a spread that may hold the key
        (
            f'd = {{1: "a", None: "b", True: "{SECRET}", (1, 2): "d", **extra}}\n'
            "return f(pw=d[True])",
            False,
        ),
        (f'd = {{"x": "{SECRET}", **extra}}\nreturn login(password=d["p"])', True),
        (f'd = {{"x": 1, **{{"p": "{SECRET}"}}}}\nreturn login(password=d["p"])', False),
        (f'd = {{**{{"q": "{SECRET}", "p": "ok"}}}}\nreturn login(password=d["p"])', True),
        (f'd = {{k: "{SECRET}"}}\nreturn login(password=d["p"])', False),
    ],
)
def test_hostile_flows_end_with_the_secret_lifted_where_it_flows(code: str, stays: bool) -> None:
    stored, _ = lifted(code)
    assert (SECRET in stored) is stays


def test_a_container_of_hostile_size_is_followed_to_every_element() -> None:
    values = ", ".join(f'"{SECRET}{i}"' for i in range(5_000))
    code = f"vals = [{values}]\nfor v in vals:\n    login(password=v)\nreturn 1"
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert len(parameters) == 5_000


def test_every_element_of_an_unknown_index_is_lifted() -> None:
    code = "vals = [" + ", ".join(f'"{SECRET}{i}"' for i in range(50)) + "]\n"
    code += "for v in vals:\n    login(password=v)\nreturn 1"
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert len(parameters) == 50


@pytest.mark.parametrize(
    ("code", "parameter"),
    [
        (f'pw = str("{SECRET}")\nreturn login(password=pw)', "pw"),
        (f'pw = "  {SECRET}  ".strip()\nreturn login(password=pw)', "pw"),
        (f'pw = "".join(reversed("{SECRET[::-1]}"))\nreturn login(password=pw)', "pw"),
        (f'pw = "{SECRET}" if flag else ""\nreturn login(password=pw)', "pw"),
        (f'pw = args.get("pw") or "{SECRET}"\nreturn login(password=pw)', "pw_2"),
        (f'def get_pw():\n    return "{SECRET}"\nreturn login(password=get_pw())', "password"),
        (f'get = lambda: "{SECRET}"\nreturn login(password=get())', "password"),
        (
            f'def load():\n    return {{"u": "ada", "p": "{SECRET}"}}\n'
            'c = load()\nreturn login(password=c["p"])',
            "password",
        ),
        (
            f'h = base64.b64encode(b"ada:{SECRET}").decode()\n'
            'return {"Authorization": "Basic " + h}',
            "authorization",
        ),
        (f'tok = "{SECRET}".encode().hex()\nreturn call(token=tok.upper())', "token"),
    ],
)
def test_a_constant_behind_a_transform_a_condition_or_a_function_is_lifted(
    code: str, parameter: str
) -> None:
    assert_lifted(code, parameter, secret=SECRET[:8] if "reversed" not in code else "Lm2p")


@pytest.mark.parametrize(
    "code",
    [
        'pw = input("Enter the password: ").strip()\nreturn login(password=pw)',
        'pw = getpass.getpass("Password: ")\nreturn login(password=pw)',
        'token = vault.read("secret/data/ci/token").strip()\nreturn call(token=token)',
        'token = os.environ.get("API_TOKEN", "").strip()\nreturn call(token=token)',
        'def label():\n    return "primary"\nreturn call(token_name=label())',
    ],
)
def test_prompts_paths_and_names_around_a_credential_keep_their_constants(code: str) -> None:
    assert lifted(code) == (code, [])
