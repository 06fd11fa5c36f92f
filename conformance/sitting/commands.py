"""What a step runs with: its words (placeholders filled), and its environment: the sitting's own, then the
plan's env, then the server's or work item's env, PYTHONPATH built from `pythonpath` (a bundle's name: its
target; `repo`: the checkout; `host`: this Python's purelib, where the host's own packages are; anything else:
a path), PYTHONUNBUFFERED=1 so that logs are current. A shell line runs under `bash -c`, its placeholders'
values quoted for the shell."""

from __future__ import annotations

import os
import re
import shlex
import sysconfig
from pathlib import Path
from typing import Mapping

from conformance.sitting.placeholders import fill, home
from conformance.sitting.plan import Plan, Run, Server


def pythonpath(entries: tuple[str, ...], values: Mapping[str, str], targets: Mapping[str, Path], repo: Path,
               keep_unknown: bool = False) -> str:
    paths = []
    for entry in entries:
        if entry in targets:
            paths.append(str(targets[entry]))
        elif entry == "repo":
            paths.append(str(repo))
        elif entry == "host":
            paths.append(sysconfig.get_path("purelib"))
        else:
            paths.append(home(fill(entry, values, keep_unknown=keep_unknown)))
    return os.pathsep.join(paths)


def environment(plan: Plan, step: Run | Server, values: Mapping[str, str], targets: Mapping[str, Path], repo: Path,
                base: Mapping[str, str] = os.environ, keep_unknown: bool = False) -> dict[str, str]:
    env = dict(base)
    for layer in (plan.env, step.env):
        env |= {k: home(fill(v, values, keep_unknown=keep_unknown)) for k, v in layer.items()}
    entries = step.pythonpath if step.pythonpath is not None else plan.pythonpath
    env["PYTHONPATH"] = pythonpath(entries, values, targets, repo, keep_unknown)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def words(step: Run | Server, values: Mapping[str, str], keep_unknown: bool = False) -> list[str]:
    if getattr(step, "shell", None):
        return ["bash", "-c", fill(step.shell, values, quote=shlex.quote, keep_unknown=keep_unknown)]
    return [home(fill(w, values, keep_unknown=keep_unknown)) for w in step.command]


UNQUOTED = re.compile(r"[\w@%+=:,./{}-]+")  # shlex's safe characters, and the braces of a placeholder left unfilled


def shown(step: Run | Server, values: Mapping[str, str]) -> str:
    """The command as the results and the dry run show it: what is known filled, the rest as {name}."""
    if getattr(step, "shell", None):
        return fill(step.shell, values, quote=shlex.quote, keep_unknown=True)
    return " ".join(w if UNQUOTED.fullmatch(w) else shlex.quote(w) for w in words(step, values, keep_unknown=True))
