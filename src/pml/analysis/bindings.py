"""The names code binds its values to: what a constant is, judged by the name it is given.

``binding_contexts(node)`` maps the ids of ``node``'s value children (grandchildren for a
tuple unpacked into names) to the name each is bound to: a keyword argument, a dict key, an
assignment's target (a name, an attribute, a string subscript, a tuple of them), a
parameter's default, the name a value is compared with, and the password of a command
written as an argument list (``["sshpass", "-p", "..."]``, ``["--api-key", "..."]``: the
list read as a command line). Secret lifting and checking read a constant under a
credential name (``password = "..."``) as a credential.

A constant given to a plain name first, or put in a container, and used as a credential
later (``x = "..."`` then ``password = x``; ``vals = ["ada", "..."]`` then
``user, password = vals``) is bound to that credential: ``credential_flow`` marks such
names and constants, and ``binding_contexts`` then names the constant by the credential it
becomes.

Example::

    >>> import ast
    >>> tree = ast.parse('user, password = "bob", "pw"')
    >>> sorted(binding_contexts(tree.body[0]).values())
    ['password', 'user']
"""

from __future__ import annotations

import ast
import re

from pml.analysis.credentials import flag_spans, is_secret_keyword, keyword_words
from pml.analysis.token_shapes import command_line_spans

# What a name lifted from an argument list is called (``["sshpass", "-p", "..."]``).
ARGV_SECRET = "password"
# What hex key material passed by position is called (``sign("9f86…", payload)``).
KEY_MATERIAL = "private_key"
# Words of a callee that takes key material: ``sign``, ``hmac.new``, ``from_key``.
_KEY_CALL_WORDS = frozenset(
    {"sign", "signer", "signing", "hmac", "key", "keys", "keypair", "secret", "token"}
    | {"password", "credential", "credentials", "login", "auth", "authenticate"}
    | {"encrypt", "decrypt", "cipher", "wallet", "account", "privkey", "seed"}
)
_HEX_DECODERS = frozenset({"fromhex", "unhexlify", "a2b_hex", "b16decode", "encode", "bytes"})
_HEX_KEY = re.compile(r"(?:0[xX])?[0-9a-fA-F]{32,512}")
# The attribute a name (``ast.Name``, ``ast.arg``) or a constant in a container carries
# when its value becomes a credential.
CREDENTIAL_ALIAS = "pml_credential"
# The attribute the parent of such a constant carries: its ids → the credential's name.
MARKED_CHILDREN = "pml_marked_children"


def literal_str(node: ast.expr) -> str | None:
    """The text of a string constant, else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def binding_contexts(node: ast.AST) -> dict[int, str]:
    """The names ``node`` binds its value children to: keyword, dict key, assignment target
    (a name, an attribute, a string subscript, a tuple of them), parameter default, the
    name a value is compared with (``password == "..."``), and the credential a constant
    was marked as (``credential_flow``; a credential name keeps its own)."""
    found = _named_contexts(node)
    marked: dict[int, str] | None = getattr(node, MARKED_CHILDREN, None)
    for child_id, alias in (marked or {}).items():
        if not is_secret_keyword(found.get(child_id, "")):
            found[child_id] = alias
    return found


def _named_contexts(node: ast.AST) -> dict[int, str]:
    if isinstance(node, ast.keyword) and node.arg is not None:
        return {id(node.value): node.arg}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) == 1 and node.value is not None:
            return _bound(targets[0], node.value)
    if isinstance(node, ast.arguments):
        positional = [*node.posonlyargs, *node.args]
        with_defaults = positional[len(positional) - len(node.defaults) :]
        pairs = [
            *zip(with_defaults, node.defaults, strict=True),
            *zip(node.kwonlyargs, node.kw_defaults, strict=True),
        ]
        return {id(default): _arg_name(arg) for arg, default in pairs if default is not None}
    if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
        return _element_contexts(node)
    if isinstance(node, ast.Compare) and len(node.comparators) == 1:
        left, right = node.left, node.comparators[0]
        return {id(right): name} if (name := _target_name(left)) else _bound(right, left)
    if isinstance(node, ast.Call) and node.args:
        return _key_material_contexts(node)
    return {}


def _key_material_contexts(call: ast.Call) -> dict[int, str]:
    """Hex key material passed by position to a signing, key or login call
    (``Account.from_key("0x…")``, ``sign("9f86…", payload)``,
    ``SigningKey(bytes.fromhex("…"))``): a hash alone is not a secret, a key is."""
    if _KEY_CALL_WORDS.isdisjoint(keyword_words(_dotted(call.func))):
        return {}
    found: dict[int, str] = {}
    for argument in call.args:
        while isinstance(argument, ast.Call) and len(argument.args) == 1:
            if _dotted(argument.func).rsplit(".", 1)[-1] not in _HEX_DECODERS:
                break
            argument = argument.args[0]
        text = literal_str(argument)
        if text is not None and _HEX_KEY.fullmatch(text) and not text.isdigit():
            found[id(argument)] = KEY_MATERIAL
    return found


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for a name or attribute chain, else the chain's end (``x().sign`` → sign)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _element_contexts(node: ast.List | ast.Tuple | ast.Set | ast.Dict) -> dict[int, str]:
    """A dict's values by their keys; an argument list's password."""
    if isinstance(node, ast.Dict):
        return {
            id(value): name
            for key, value in zip(node.keys, node.values, strict=True)
            if key is not None and (name := literal_str(key)) is not None
        }
    return _argv_contexts(node.elts) if len(node.elts) >= 2 else {}


def _arg_name(node: ast.arg) -> str:
    alias = getattr(node, CREDENTIAL_ALIAS, None)
    return alias if isinstance(alias, str) else node.arg


def _target_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        alias = getattr(node, CREDENTIAL_ALIAS, None)
        return alias if isinstance(alias, str) else node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return literal_str(node.slice)
    return None


def _bound(target: ast.expr, value: ast.expr) -> dict[int, str]:
    if (name := _target_name(target)) is not None:
        return {id(value): name}
    if not isinstance(target, ast.Tuple | ast.List) or not isinstance(value, ast.Tuple | ast.List):
        return {}
    if len(target.elts) != len(value.elts):
        return {}
    found = [(id(v), _target_name(t)) for t, v in zip(target.elts, value.elts, strict=True)]
    return {key: name for key, name in found if name is not None}


def _argv_contexts(elements: list[ast.expr]) -> dict[int, str]:
    """The elements of an argument list that hold a command line's password (see module)."""
    texts = [literal_str(element) for element in elements]
    if not any(text is not None and text.startswith("-") for text in texts):
        return {}
    # Anything but a string constant reads as a variable (the finders skip ``$...``).
    words = ["$" if text is None else text for text in texts]
    starts: list[int] = []
    offset = 0
    for word in words:
        starts.append(offset)
        offset += len(word) + 1
    line = " ".join(words)
    found: dict[int, str] = {}
    for start, _ in [*command_line_spans(line), *flag_spans(line)]:
        index = max(i for i, at in enumerate(starts) if at <= start)
        if texts[index] is not None:
            found[id(elements[index])] = ARGV_SECRET
    return found
