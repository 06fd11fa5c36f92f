"""The plan's placeholders: `{name}` in a command, an argument, an environment value or a PYTHONPATH entry,
filled when its step starts. Only `{` + a name + `}` is a placeholder, so JSON in an argument
(`'{"max_new_tokens": 257}'`) stays as written. A word that starts with `~` has the home folder put in."""

from __future__ import annotations

import os
import re
from typing import Callable, Mapping

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


class Unfilled(KeyError):
    """A placeholder that has no value when its step starts (a `yields` whose step did not run ok)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def names(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def fill(text: str, values: Mapping[str, str], quote: Callable[[str], str] = str, keep_unknown: bool = False) -> str:
    """`text` with each `{name}` replaced by quote(values[name]); raises Unfilled for a name without a value,
    unless keep_unknown (the dry run: what is known only once the sitting runs stays as `{name}`)."""

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name in values:
            return quote(str(values[name]))
        if keep_unknown:
            return match.group(0)
        raise Unfilled(name)

    return PLACEHOLDER.sub(value, text)


def home(word: str) -> str:
    """`~` or `~/...` at the start of a word: the home folder."""
    return os.path.expanduser(word) if word.startswith("~") else word
