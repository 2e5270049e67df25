import re

import pytest
from wormhole._wordlist import PGPWordList, raw_words

from burrow.client import codes
from burrow.client.errors import CodeFormatError
from burrow.client.wordlist import EVEN_WORDS, ODD_WORDS, WORDS


def test_wordlist_is_magic_wormholes():
    assert len(WORDS) == 256
    for i, (even, odd) in enumerate(WORDS):
        assert raw_words[f"{i:02X}"] == [even, odd]
    assert len(set(EVEN_WORDS) | set(ODD_WORDS)) == 512


def test_choose_words_alternates_odd_then_even():
    for _ in range(50):
        words = codes.choose_words(4).split("-")
        assert words[0] in ODD_WORDS and words[2] in ODD_WORDS
        assert words[1] in EVEN_WORDS and words[3] in EVEN_WORDS


def test_make_code_format():
    assert re.fullmatch(r"42-[a-z]+-[a-z]+", codes.make_code("42", 2))


@pytest.mark.parametrize("bad", ["", "abc-def", "4", "4-", " 4-a-b", "4-a b", "-a-b"])
def test_validate_rejects(bad):
    with pytest.raises(CodeFormatError):
        codes.validate_code(bad)


def test_validate_returns_nameplate():
    assert codes.validate_code("123-purple-sausages") == "123"


@pytest.mark.parametrize("prefix", ["4-", "4-p", "4-pur", "4-purple-", "4-purple-s", "4-purple-sau", "4-zz"])
def test_word_completion_matches_magic_wormhole(prefix):
    # magic-wormhole's completer is given the part after "<nameplate>-"
    words_part = prefix.split("-", 1)[1]
    expected = sorted("4-" + c for c in PGPWordList().get_completions(words_part, 2))
    assert codes.completions(prefix, [], 2) == expected


def test_nameplate_completion():
    assert codes.completions("1", ["1", "12", "3"]) == ["1-", "12-"]
    assert codes.completions("", ["2"]) == ["2-"]


def test_no_completion_past_last_word():
    assert codes.completions("4-purple-sausages-", [], 2) == []
