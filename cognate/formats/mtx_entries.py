"""The strict check of Matrix Market entry lines (``EntryChecker``): exactly the numbers
a line's field needs, each in its decimal form."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import numpy as np

# Strict forms of the numbers on an entry line (C's strtod/strtol syntax, decimal only).
_INDEX_TOKEN = re.compile(rb"[0-9]+")
_INTEGER_TOKEN = re.compile(rb"[+-]?[0-9]+")
_REAL_TOKEN = re.compile(
    rb"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I
)
_VALUES_PER_ENTRY = {"pattern": 0, "integer": 1, "real": 1, "complex": 2}
_DIGITS = b"0123456789"
_MAX_LINE = 1 << 20  # an entry line longer than this is not Matrix Market
_PIECE_BYTES = 1 << 18  # 256 KiB


class EntryChecker:
    """Checks that every entry line holds exactly the numbers its field needs, each in its
    strict form: fast_matrix_market reads '0x10' as 0, '5abc' as 5, 1.5 in an integer file
    as 1, and ignores extra numbers on a line.

    Fed the text as the parser reads it (header first), the lines each chunk completes at a
    time. A vectorised test (every byte mapped to its class by one ``bytes.translate``,
    then numpy: allowed characters, numbers per line, where signs, points and exponents
    stand) costs a few passes over the bytes; only a chunk that fails it (or holds letters:
    inf, nan; or blank lines) is read again line by line, in pieces of ~1 MiB, which finds
    the line and says what is wrong with it. The indices' own syntax and range, and a line
    with too few numbers, the parser checks.
    """

    def __init__(self, head: bytes, layout: str, field: str) -> None:
        self.skip, self.line = _header_extent(head)  # bytes and lines before the entries
        self.field = field
        self.indices = 2 if layout == "coordinate" else 0
        self.expected = self.indices + _VALUES_PER_ENTRY[field]
        self.classes = _class_table(field)
        self.carry = b""
        self.done = False

    def feed(self, data: bytes) -> str | None:
        """None, or what is wrong with the first bad line completed by ``data``."""
        if self.skip:
            data, self.skip = data[self.skip :], max(0, self.skip - len(data))
        cut = data.rfind(b"\n") + 1
        if not cut:
            self.carry += data
            if len(self.carry) > _MAX_LINE:
                return f"Matrix Market line {self.line + 1} is longer than {_MAX_LINE} bytes"
            return None
        text = b"".join((self.carry, memoryview(data)[:cut]))  # one copy
        self.carry = data[cut:]
        return self._check(text)

    def finish(self) -> str | None:
        """At the end of the text: the last line, if it has no newline."""
        if self.done:
            return None
        self.done = True
        text, self.carry = self.carry, b""
        return self._check(text)

    def _check(self, text: bytes) -> str | None:
        # In pieces of whole lines that fit the CPU's cache: the dozen passes of the
        # vectorised test then cost little more than one.
        for piece in _pieces(text, _PIECE_BYTES):
            right, newlines = self._looks_right(piece)
            if not right:
                problem = self._find_problem(piece, self.line + 1)
                if problem is not None:
                    return problem
            self.line += newlines
        return None

    def _looks_right(self, text: bytes) -> tuple[bool, int]:
        """The vectorised test, and the number of newlines in ``text``: True means every
        line is right; False, that some line may be wrong (or blank: allowed, but only
        counted slowly)."""
        c = np.empty(len(text) + 2, dtype=np.uint8)  # padded: every byte has two sides
        c[0] = c[-1] = _C_SPACE
        c[1:-1] = np.frombuffer(text.translate(self.classes), dtype=np.uint8)
        newlines = int(np.count_nonzero(c == _C_NEWLINE))
        if np.any(c == _C_OTHER):
            return False, newlines  # other characters: letters of inf / nan, or wrong
        space = c <= _C_SPACE
        lines = newlines + (not text.endswith(b"\n"))
        # A line with fewer numbers than its field needs fails the parser; so as many
        # numbers as lines times the field's count means exactly that many on each line.
        if np.count_nonzero(space[:-1] > space[1:]) != lines * self.expected:
            return False, newlines
        return self.field == "pattern" or _numbers_look_right(c, space), newlines

    def _find_problem(self, text: bytes, first: int) -> str | None:
        """The first bad line of ``text`` (its first line is number ``first``), slowly."""
        strict = _INTEGER_TOKEN if self.field == "integer" else _REAL_TOKEN
        for number, line in enumerate(text.split(b"\n"), first):
            tokens = line.split()
            if not tokens:
                continue  # blank lines may appear anywhere
            if len(tokens) != self.expected:
                return (
                    f"Matrix Market line {number}: {len(tokens)} numbers, an entry of a "
                    f"{self.field} file has {self.expected}"
                )
            for position, token in enumerate(tokens):
                index = position < self.indices
                if not (_INDEX_TOKEN if index else strict).fullmatch(token):
                    kind = "an index" if index else f"{_article(self.field)} {self.field} number"
                    shown = token[:40].decode("ascii", "replace")
                    return f"Matrix Market line {number}: {shown!r} is not {kind}"
        return None


# Byte classes of an entry line (``_class_table``): the spaces first, so that "c <= space"
# finds them all.
_C_NEWLINE, _C_SPACE, _C_DIGIT, _C_POINT, _C_EXP, _C_SIGN, _C_OTHER = range(7)


def _class_table(field: str) -> bytes:
    """A ``bytes.translate`` table from each byte to its class; a character the field
    cannot hold (a point in an integer file, a sign in a pattern file) is 'other'."""
    table = bytearray([_C_OTHER]) * 256
    table[ord("\n")] = _C_NEWLINE
    for byte in b" \t\r":
        table[byte] = _C_SPACE
    for byte in _DIGITS:
        table[byte] = _C_DIGIT
    if field != "pattern":
        table[ord("+")] = table[ord("-")] = _C_SIGN
    if field in ("real", "complex"):
        table[ord(".")] = _C_POINT
        table[ord("e")] = table[ord("E")] = _C_EXP
    return bytes(table)


def _pieces(text: bytes, size: int) -> Iterator[bytes]:
    """``text`` (whole lines) in pieces of whole lines of about ``size`` bytes."""
    start = 0
    while start < len(text):
        cut = text.find(b"\n", start + size) + 1 or len(text)
        yield text[start:cut]
        start = cut


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _mark_table() -> np.ndarray:
    """Whether a sign, point or exponent (the middle class) may stand between the classes
    before and after it, indexed by ``(before * 7 + mark) * 7 + after``: a sign first or
    after an exponent and before a digit (or a point, not after an exponent), a point next
    to a digit, an exponent after a digit or point and before a digit or sign."""
    table = np.zeros(7 * 7 * 7, dtype=bool)
    spaces = (_C_NEWLINE, _C_SPACE)
    for before, mark, after in itertools.product(range(7), repeat=3):
        if mark == _C_SIGN:
            ok = (before in spaces and after in (_C_DIGIT, _C_POINT)) or (
                before == _C_EXP and after == _C_DIGIT
            )
        elif mark == _C_POINT:
            ok = _C_DIGIT in (before, after)
        else:
            ok = before in (_C_DIGIT, _C_POINT) and after in (_C_DIGIT, _C_SIGN)
        table[(before * 7 + mark) * 7 + after] = ok
    return table


def _numbers_look_right(c: np.ndarray, space: np.ndarray) -> bool:
    """Signs, decimal points and exponents in their places (``c``: the padded byte
    classes of a text, ``space``: where it has spaces): each between the right neighbours
    (``_mark_table``), at most one point and one exponent per number, the point first.
    Only the marks and their neighbours are read."""
    at = np.flatnonzero((c - np.uint8(_C_POINT)) <= _C_SIGN - _C_POINT)  # points, exps, signs
    if not at.size:
        return True
    kind = c[at]
    code = (c[at - 1].astype(np.intp) * 7 + kind) * 7 + c[at + 1]
    if not _MARK_OK[code].all():
        return False
    # Two marks in one number: with the digits taken out they stand side by side (or with
    # the exponent's sign between), and only a point then an exponent is allowed.
    if np.count_nonzero(kind != _C_SIGN) < 2:
        return True
    rest = c[c != _C_DIGIT]
    point, exp, sign = rest == _C_POINT, rest == _C_EXP, rest == _C_SIGN
    second = (point | exp)[1:]
    bad = (point[:-1] & point[1:]) | (exp[:-1] & second)
    bad[1:] |= exp[:-2] & sign[1:-1] & second[1:]
    return not bad.any()


_MARK_OK = _mark_table()


def _header_extent(head: bytes) -> tuple[int, int]:
    """Bytes and lines of the banner, comments and size line at the start of ``head``."""
    offset, lines, banner = 0, 0, True
    while offset < len(head):
        end = head.find(b"\n", offset)
        end = len(head) if end < 0 else end + 1
        line = head[offset:end].strip()
        offset, lines = end, lines + 1
        if banner:
            banner = False
        elif line and not line.startswith(b"%"):
            break  # the size line
    return offset, lines
