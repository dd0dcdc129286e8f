from __future__ import annotations

import random

import pytest

from trainpace.trace.substrings import occurrences


def brute_force(texts: list[str], literals: tuple[str, ...]) -> list[tuple[int, int, int]]:
    return sorted(
        (t, li, at)
        for t, text in enumerate(texts)
        for li, lit in enumerate(literals)
        for at in range(len(text) - len(lit) + 1)
        if text.startswith(lit, at)
    )


def found(texts: list[str], literals: tuple[str, ...]) -> list[tuple[int, int, int]]:
    text, lit, start = occurrences(texts, literals)
    return sorted(zip(text.tolist(), lit.tolist(), start.tolist(), strict=True))


def test_overlapping_and_at_the_edges() -> None:
    literals = ("aba", "ab", "bab", "abababababababababab", "b_c::d")
    texts = ["ababab", "", "ab", "b", "xxab", "abababababababababab", "b_c::d", "\x00ab\x00"]
    assert found(texts, literals) == brute_force(texts, literals)
    assert (0, 0, 0) in found(texts, literals) and (0, 0, 2) in found(texts, literals)


def test_nothing_to_find() -> None:
    assert found([], ("abc",)) == []
    assert found(["abc"], ()) == []
    assert found(["", "a"], ("abc",)) == []
    assert found(["zzzz"], ("abc",)) == []


@pytest.mark.parametrize("seed", range(5))
def test_random_texts_equal_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "ab_:c"
    literals = tuple({"".join(rng.choice(alphabet) for _ in range(rng.randint(2, 19)))
                      for _ in range(40)})
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
             for _ in range(300)]
    assert found(texts, literals) == brute_force(texts, literals)


def test_bad_literals_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        occurrences(["abc"], ("a",))
    with pytest.raises(ValueError, match="NUL"):
        occurrences(["abc"], ("a\x00b",))
