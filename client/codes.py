"""Wormhole codes: `<nameplate>-<word>[-<word>...]`, words from the PGP list, and tab completion.

The first word after the nameplate comes from the odd list, the next from the even list, and so on
(magic-wormhole's order), so completion offers the right half of the list for each position.
"""

from __future__ import annotations

import re
import secrets

from .errors import CodeFormatError
from .wordlist import EVEN_WORDS, ODD_WORDS

DEFAULT_CODE_LENGTH = 2
MAX_CODE_LENGTH = 16
_NAMEPLATE_RE = re.compile(r"[0-9]+")


def validate_nameplate(nameplate: str) -> None:
    if not _NAMEPLATE_RE.fullmatch(nameplate):
        raise CodeFormatError(f"nameplate {nameplate!r} must be numeric, with no spaces")


def validate_code(code: str) -> str:
    """Return the nameplate of a well-formed code, else raise CodeFormatError."""
    if not code or any(c.isspace() for c in code):
        raise CodeFormatError(f"code {code!r} is empty or contains spaces")
    nameplate, sep, rest = code.partition("-")
    validate_nameplate(nameplate)
    if not sep or not rest:
        raise CodeFormatError(f"code {code!r} needs at least one word after the nameplate")
    return nameplate


def words_for_position(index: int) -> tuple[str, ...]:
    """Word list for the index-th word after the nameplate (0-based)."""
    return ODD_WORDS if index % 2 == 0 else EVEN_WORDS


def choose_words(length: int) -> str:
    if not 1 <= length <= MAX_CODE_LENGTH:
        raise CodeFormatError(f"code length must be 1..{MAX_CODE_LENGTH} words")
    return "-".join(words_for_position(i)[secrets.randbelow(256)] for i in range(length))


def make_code(nameplate: str, length: int = DEFAULT_CODE_LENGTH) -> str:
    validate_nameplate(nameplate)
    return f"{nameplate}-{choose_words(length)}"


def completions(prefix: str, nameplates: set[str] | list[str], num_words: int = DEFAULT_CODE_LENGTH) -> list[str]:
    """Sorted completions of a partly typed code.

    With no hyphen yet, complete the nameplate from the server's list (adding "-"). Otherwise complete
    the last word from the list for its position; add "-" if more words are expected.
    """
    if "-" not in prefix:
        return sorted(n + "-" for n in nameplates if n.startswith(prefix))
    head, _, partial = prefix.rpartition("-")
    index = prefix.count("-") - 1
    if index >= num_words:
        return []
    partial = partial.lower()
    tail = "-" if index + 1 < num_words else ""
    return sorted(f"{head}-{w}{tail}" for w in words_for_position(index) if w.startswith(partial))
