"""Word error rate after an English normalisation, the way seed-tts-eval compares transcripts.

The normalisation, applied to reference and hypothesis alike:
1. Unicode NFKC; curly quotes and dashes to ASCII;
2. numbers spelled out: "7" -> "seven", "1,250" -> "one thousand two hundred fifty",
   "3.5" -> "three point five", ordinals "2nd" -> "second", "%" -> "percent" (integers up to
   999 999 999; longer digit strings are read digit by digit);
3. lower case;
4. punctuation removed, except an apostrophe inside a word ("don't"); hyphens and slashes
   become spaces ("twenty-one" -> "twenty one");
5. whitespace collapsed.
Spelling variants (colour/color), contractions and abbreviations are not unified: Whisper
prints them as spoken, and the prompt set avoids them.

WER per utterance = (substitutions + deletions + insertions) / reference words (jiwer); the
set's score is the mean over utterances, as in seed-tts-eval.
"""

from __future__ import annotations

import re
import unicodedata

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((1_000_000, "million"), (1_000, "thousand"), (100, "hundred"))
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
            "nine": "ninth", "twelve": "twelfth"}
_ASCII = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})


def number_words(n: int) -> str:
    """0 <= n < 10**9 in English words, without "and": 105 -> "one hundred five"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for value, name in _SCALES:
        if n >= value:
            head, rest = divmod(n, value)
            return f"{number_words(head)} {name}" + ("" if rest == 0 else " " + number_words(rest))
    raise AssertionError(n)


def ordinal_words(n: int) -> str:
    words = number_words(n).split()
    last = words[-1]
    if last in _ORDINAL:
        words[-1] = _ORDINAL[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _spell_number(match: re.Match) -> str:
    digits, fraction, suffix = match.group(1).replace(",", ""), match.group(2), (match.group(3) or "").lower()
    if len(digits) > 9:
        return " ".join(_ONES[int(d)] for d in digits)
    if suffix in ("st", "nd", "rd", "th"):
        return " " + ordinal_words(int(digits)) + " "
    words = number_words(int(digits))
    if fraction:
        words += " point " + " ".join(_ONES[int(d)] for d in fraction)
    return f" {words} " + ("percent " if suffix == "%" else "")


_NUMBER = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(st|nd|rd|th|%)?", re.IGNORECASE)


def normalise(text: str) -> str:
    """The English normalisation described in the module docstring."""
    text = unicodedata.normalize("NFKC", text).translate(_ASCII)
    text = _NUMBER.sub(_spell_number, text)
    text = text.lower()
    text = re.sub(r"[-/]", " ", text)
    text = re.sub(r"(?<![a-z0-9])'|'(?![a-z0-9])", " ", text)  # quotes, not apostrophes in words
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return " ".join(text.split())


def wer(reference: str, hypothesis: str) -> float:
    """WER of one utterance after normalisation; an empty hypothesis is all deletions (1.0)."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        raise ValueError(f"reference {reference!r} is empty after normalisation")
    if not hyp:
        return 1.0
    import jiwer  # here, not at the top: a host without the scorers still collects the quality checks, which skip

    return float(jiwer.wer(ref, hyp))
