"""The character data of the seed's study: A-Z and a-z as bitmaps, and their 7-bit ASCII targets.

The glyphs are the project's own 5 x 8 bitmap font (below, one string per letter, rows top to
bottom, '1' = ink), generated into the study's two encodings:
  60-bit:  6 wide x 10 tall, the 5 x 8 glyph with a blank border (right column, top and bottom rows);
  120-bit: 10 wide x 12 tall, the glyph doubled across and stretched 8 -> 12 rows down.
The target of a letter is its ASCII code on 7 outputs, most significant bit first: 'A' (0x41) is
1000001 and 'r' (0x72) is 1110010, as in the seed.

Noisy letters (bit flips and one-pixel shifts) come from a seeded generator, so a training set
and a held-out test set of any size are reproducible.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

FONT = {
    "A": "01110/10001/10001/10001/11111/10001/10001/00000",
    "B": "11110/10001/10001/11110/10001/10001/11110/00000",
    "C": "01110/10001/10000/10000/10000/10001/01110/00000",
    "D": "11100/10010/10001/10001/10001/10010/11100/00000",
    "E": "11111/10000/10000/11110/10000/10000/11111/00000",
    "F": "11111/10000/10000/11110/10000/10000/10000/00000",
    "G": "01110/10001/10000/10111/10001/10001/01111/00000",
    "H": "10001/10001/10001/11111/10001/10001/10001/00000",
    "I": "01110/00100/00100/00100/00100/00100/01110/00000",
    "J": "00111/00010/00010/00010/00010/10010/01100/00000",
    "K": "10001/10010/10100/11000/10100/10010/10001/00000",
    "L": "10000/10000/10000/10000/10000/10000/11111/00000",
    "M": "10001/11011/10101/10101/10001/10001/10001/00000",
    "N": "10001/10001/11001/10101/10011/10001/10001/00000",
    "O": "01110/10001/10001/10001/10001/10001/01110/00000",
    "P": "11110/10001/10001/11110/10000/10000/10000/00000",
    "Q": "01110/10001/10001/10001/10101/10010/01101/00000",
    "R": "11110/10001/10001/11110/10100/10010/10001/00000",
    "S": "01111/10000/10000/01110/00001/00001/11110/00000",
    "T": "11111/00100/00100/00100/00100/00100/00100/00000",
    "U": "10001/10001/10001/10001/10001/10001/01110/00000",
    "V": "10001/10001/10001/10001/10001/01010/00100/00000",
    "W": "10001/10001/10001/10101/10101/10101/01010/00000",
    "X": "10001/10001/01010/00100/01010/10001/10001/00000",
    "Y": "10001/10001/10001/01010/00100/00100/00100/00000",
    "Z": "11111/00001/00010/00100/01000/10000/11111/00000",
    "a": "00000/00000/01110/00001/01111/10001/01111/00000",
    "b": "10000/10000/10110/11001/10001/10001/11110/00000",
    "c": "00000/00000/01110/10000/10000/10001/01110/00000",
    "d": "00001/00001/01101/10011/10001/10001/01111/00000",
    "e": "00000/00000/01110/10001/11111/10000/01110/00000",
    "f": "00110/01001/01000/11100/01000/01000/01000/00000",
    "g": "00000/00000/01111/10001/10001/01111/00001/01110",
    "h": "10000/10000/10110/11001/10001/10001/10001/00000",
    "i": "00100/00000/01100/00100/00100/00100/01110/00000",
    "j": "00010/00000/00110/00010/00010/00010/10010/01100",
    "k": "10000/10000/10010/10100/11000/10100/10010/00000",
    "l": "01100/00100/00100/00100/00100/00100/01110/00000",
    "m": "00000/00000/11010/10101/10101/10001/10001/00000",
    "n": "00000/00000/10110/11001/10001/10001/10001/00000",
    "o": "00000/00000/01110/10001/10001/10001/01110/00000",
    "p": "00000/00000/11110/10001/10001/11110/10000/10000",
    "q": "00000/00000/01101/10011/10001/01111/00001/00001",
    "r": "00000/00000/10110/11001/10000/10000/10000/00000",
    "s": "00000/00000/01110/10000/01110/00001/11110/00000",
    "t": "01000/01000/11100/01000/01000/01001/00110/00000",
    "u": "00000/00000/10001/10001/10001/10011/01101/00000",
    "v": "00000/00000/10001/10001/10001/01010/00100/00000",
    "w": "00000/00000/10001/10001/10101/10101/01010/00000",
    "x": "00000/00000/10001/01010/00100/01010/10001/00000",
    "y": "00000/00000/10001/10001/10001/01111/00001/01110",
    "z": "00000/00000/11111/00010/00100/01000/11111/00000",
}
LETTERS = string.ascii_uppercase + string.ascii_lowercase
ENCODINGS = {60: (6, 10), 120: (10, 12)}  # input width -> (columns, rows)
OUTPUTS = 7


def _glyph(letter: str) -> np.ndarray:
    return np.array([[c == "1" for c in row] for row in FONT[letter].split("/")], dtype=np.uint8)


def bitmap(letter: str, bits: int) -> np.ndarray:
    """The letter in an encoding, as a (rows, columns) 0/1 array."""
    g = _glyph(letter)
    if bits == 60:
        out = np.zeros((10, 6), dtype=np.uint8)
        out[1:9, 0:5] = g
        return out
    if bits == 120:
        rows = [r * 8 // 12 for r in range(12)]  # 0 0 1 2 2 3 4 4 5 6 6 7
        return np.repeat(g[rows], 2, axis=1)
    raise ValueError(f"encoding {bits}: choose from {', '.join(map(str, ENCODINGS))}")


def target(letter: str) -> np.ndarray:
    """The 7-bit ASCII code, most significant bit first."""
    return np.array([(ord(letter) >> (6 - i)) & 1 for i in range(OUTPUTS)], dtype=np.float64)


def render(bitmap_: np.ndarray) -> str:
    return "\n".join("".join("#" if v else "." for v in row) for row in bitmap_)


@dataclass
class Dataset:
    """Inputs (samples x bits) and targets (samples x 7), float64, and which letter each row is."""

    x: np.ndarray
    t: np.ndarray
    letters: list[str]

    def __len__(self) -> int:
        return len(self.letters)

    def take(self, rows) -> Dataset:
        """The samples at `rows` (a slice or an index array), in that order."""
        idx = np.arange(len(self))[rows]
        return Dataset(self.x[idx], self.t[idx], [self.letters[i] for i in idx])


def clean(bits: int) -> Dataset:
    """The 52 letters, once each: the seed's training set."""
    x = np.stack([bitmap(c, bits).ravel() for c in LETTERS]).astype(np.float64)
    return Dataset(x, np.stack([target(c) for c in LETTERS]), list(LETTERS))


def noisy(bits: int, per_letter: int, seed: int, flips: int = 2, shift_prob: float = 0.5) -> Dataset:
    """`per_letter` distorted copies of every letter: a one-pixel shift (up, down, left or right,
    with probability `shift_prob`) and then `flips` random pixels inverted."""
    rng = np.random.default_rng(seed)
    xs, ts, names = [], [], []
    for c in LETTERS:
        base, code = bitmap(c, bits), target(c)
        for _ in range(per_letter):
            img = base
            if rng.random() < shift_prob:
                axis, step = (0, 1)[rng.integers(2)], (-1, 1)[rng.integers(2)]
                img = _shift(base, axis, step)
            img = img.ravel().copy()
            idx = rng.choice(img.size, size=flips, replace=False)
            img[idx] ^= 1
            xs.append(img)
            ts.append(code)
            names.append(c)
    return Dataset(np.array(xs, dtype=np.float64), np.array(ts), names)


def _shift(img: np.ndarray, axis: int, step: int) -> np.ndarray:
    """Shift by one pixel with blank fill (never wrap: a wrapped row would be a different glyph)."""
    out = np.zeros_like(img)
    if axis == 0:
        if step > 0:
            out[1:] = img[:-1]
        else:
            out[:-1] = img[1:]
    elif step > 0:
        out[:, 1:] = img[:, :-1]
    else:
        out[:, :-1] = img[:, 1:]
    return out


def decode(outputs: np.ndarray) -> str:
    """Seven outputs -> the character whose code they spell when rounded (may be any ASCII)."""
    bits = (np.asarray(outputs) >= 0.5).astype(int)
    return chr(int("".join(map(str, bits)), 2))
