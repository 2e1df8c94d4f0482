"""libs/fastcheck: the C batch checks answer as their Python twin, and never pass what
Python's json rejects (generated values, mutated texts, hand-picked edge cases)."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from ratchet.libs import fastcheck
from ratchet.libs.fastcheck import json_value_ok, py_all_canonical_ids, py_first_bad_json
from ratchet.libs.shardmap import new_task_ids

native = pytest.mark.skipif(not fastcheck.NATIVE, reason="checked by test_the_c_module_is_built")


def test_the_c_module_is_built():
    # make setup compiles it (setup.py marks it optional so an install without gcc still
    # works): a build that silently fell back would lose the batch path's speed unseen.
    assert fastcheck.NATIVE, "libs/fastcheck/_fastcheck.c was not built: is gcc installed?"


def _strict(text: str) -> bool:
    """The verdict every path must agree with when the fast check passes."""
    def no_constant(name):
        raise ValueError(name)
    try:
        json.JSONDecoder(parse_constant=no_constant).decode(text)
        return True
    except (ValueError, RecursionError):
        return False


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randrange(-10**12, 10**12)
    if kind == 3:
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-30, 30)
    if kind in (4, 5):
        alphabet = 'ab"\\/\n\t\x01\x7féü€😀 \u2028'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
    if kind in (6, 7):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {str(_value(rng, 3)): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = json.dumps(_value(rng), ensure_ascii=rng.random() < 0.5,
                          separators=rng.choice([(",", ":"), (", ", ": "), (" ,\t", "\r:\n")]))
        out.append(text)
        # mutations: cut, insert, delete, swap one character
        for _ in range(3):
            t = list(text)
            op = rng.randrange(4)
            i = rng.randrange(len(t) + 1)
            if op == 0:
                t = t[:i]
            elif op == 1:
                t.insert(i, rng.choice('{}[]",:\\ -+.eE0123456789tfnu\x00\n'))
            elif op == 2 and i < len(t):
                del t[i]
            elif op == 3 and i < len(t):
                t[i] = rng.choice('{}[]",:\\ -+.eE019aZ\x1f')
            out.append("".join(t))
    return out


EDGES = [
    "", " ", "1", " 1", "1 ", "\n1", "-", "-0", "-01", "01", "0.", "0.5", ".5", "1e", "1e+", "1e+5", "1E-0",
    "1.5e3", "1.5E+3x", "NaN", "Infinity", "-Infinity", "[NaN]", "nul", "null", "nulll", "true", "True",
    "fals", "false", '"', '""', '"\\"', '"\\u12"', '"\\u12g4"', '"\\u12aF"', '"\\ud800"', '"\\x41"',
    '"a\tb"', '"a\x7fb"', '"\x00"', "[", "[]", "[,]", "[1,]", "[1 , 2]", "{}", "{,}", '{"a"}', '{"a":}',
    '{"a":1,}', '{"a" : 1 , "b":[]}', '{1:2}', '{"a":1}}', "[[]]]", "[" * 200 + "]" * 200,
    "[" * 100 + "]" * 100, "1" * 4001, "1" * 3999, "-" + "1" * 3998, "[1]\x00", "\ufeff1", "[\u00a01]",
]


@native
@pytest.mark.parametrize("seed", range(4))
def test_c_and_python_agree_on_generated_and_mutated_texts(seed):
    texts = _texts(seed, 400)
    for t in texts + EDGES:
        c, py = fastcheck.first_bad_json([t]) == -1, py_first_bad_json([t]) == -1
        assert c == py or (py and not c), f"C {c} Python {py} for {t!r}"
        if c:
            assert _strict(t), f"C passed {t!r}, which json rejects"
    # and as one list: the same first index
    assert fastcheck.first_bad_json(texts) == py_first_bad_json(texts)


@native
def test_c_takes_every_compact_value_json_writes():
    rng = random.Random(7)
    texts = [json.dumps(_value(rng), separators=(",", ":"), ensure_ascii=False) for _ in range(2000)]
    assert fastcheck.first_bad_json(texts) == -1
    assert fastcheck.first_bad_json([t.encode() for t in texts]) == -1


@native
def test_bytes_must_be_utf8():
    good = '{"name":"Zoë","e":"€"}'.encode()
    assert fastcheck.first_bad_json([good]) == -1
    for bad in (b'"\xff"', b'"\xc3"', b'"\xed\xa0\x80"', b'"\xc0\xaf"', b'"\xf4\x90\x80\x80"'):
        assert fastcheck.first_bad_json([good, bad]) == 1, bad
        assert not json_value_ok(bad)


@native
def test_a_str_with_a_lone_surrogate_is_left_to_python():
    lone = '"\ud800"'
    assert fastcheck.first_bad_json([lone]) == 0  # (no UTF-8 form: C does not decide)
    assert json_value_ok(lone)  # (Python's json takes it; the caller's own path decides)


@native
def test_the_first_bad_index_is_reported_and_types_are_checked():
    items = ["1", b"2", "[3]", "{", "4"]
    assert fastcheck.first_bad_json(items) == 3 == py_first_bad_json(items)
    assert fastcheck.first_bad_json(tuple(items[:3])) == -1
    assert fastcheck.first_bad_json([]) == -1
    with pytest.raises(TypeError, match="str or bytes"):
        fastcheck.first_bad_json(["1", 2])
    with pytest.raises(TypeError):
        fastcheck.first_bad_json(None)


@native
def test_canonical_ids_agree_with_the_regex():
    ids = new_task_ids(300)
    assert fastcheck.all_canonical_ids(ids) and py_all_canonical_ids(ids)
    assert fastcheck.all_canonical_ids([]) and py_all_canonical_ids([])
    v4 = str(uuid.uuid4())
    good = ids[0]
    variants = [v4, good.upper(), good[:-1], good + "0", good.replace("-", ""), "{" + good[1:],
                good[:14] + "7" + good[15:], good[:19] + "c" + good[20:], good[:8] + "\n" + good[9:],
                good[:35] + "\u00e9", good[:35] + "g", 5, None, good.encode()]
    for v in variants:
        assert fastcheck.all_canonical_ids(ids + [v]) is False, v
        assert py_all_canonical_ids(ids + [v]) is False, v
    for ch in "89ab":
        v = good[:19] + ch + good[20:]
        assert fastcheck.all_canonical_ids([v]) is py_all_canonical_ids([v]) is True


@native
def test_copy_rows_writes_what_its_python_twin_writes():
    ids = new_task_ids(150)
    payloads = [b'{"n":%d}' % i for i in range(149)] + [b""]
    shared = b"\x00\x00\x00\x02ab\xff\xff\xff\xff"
    data = fastcheck.copy_rows(ids, payloads, 4, shared)
    assert data == fastcheck.py_copy_rows(ids, payloads, 4, shared)
    assert data.startswith(fastcheck.COPY_HEADER) and data.endswith(fastcheck.COPY_TRAILER)
    first = data[len(fastcheck.COPY_HEADER):]
    assert first[:2] == b"\x00\x04" and first[2:6] == b"\x00\x00\x00\x10"
    assert first[6:22] == uuid.UUID(ids[0]).bytes and first[22:26] == b"\x00\x00\x00\x07"
    assert first[26:33] == b'{"n":0}' and first[33:33 + len(shared)] == shared
    assert fastcheck.copy_rows([], [], 2, b"") == fastcheck.COPY_HEADER + fastcheck.COPY_TRAILER


@pytest.mark.parametrize("impl", ["c", "python"])
def test_copy_rows_refuses_what_it_cannot_write(impl):
    if impl == "c" and not fastcheck.NATIVE:
        pytest.skip("checked by test_the_c_module_is_built")
    copy_rows = fastcheck.copy_rows if impl == "c" else fastcheck.py_copy_rows
    ids = new_task_ids(2)
    with pytest.raises(ValueError, match="canonical"):
        copy_rows([ids[0], ids[1].upper()], [b"1", b"2"], 3, b"")
    with pytest.raises(TypeError, match=r"payloads\[1\]"):
        copy_rows(ids, [b"1", "2"], 3, b"")
    with pytest.raises(ValueError, match="one payload per id"):
        copy_rows(ids, [b"1"], 3, b"")
    with pytest.raises(ValueError, match="nfields"):
        copy_rows(ids, [b"1", b"2"], 1, b"")
