"""The plan of a GPU sitting (docs/sitting.md), read from YAML and checked whole before anything runs: the
bundles to install, the steps to run in order (work items; servers, each with its own work items), the time
budget. A key the format does not know, a missing limit, a name used twice and a placeholder nothing fills
are refused (PlanError) with the place they were found."""

from __future__ import annotations

import json
import shlex
import signal
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from conformance.sitting.placeholders import PLACEHOLDER, names

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
BUILTIN = ("repo", "results", "python")  # the checkout (every step's working folder), the results folder, this Python
PER_STEP = ("dir",)  # the step's own folder under the results
PER_SERVER = ("url", "port", "host")  # in a server's command and in its work items
PYTHONPATH_WORDS = ("repo", "host")  # the checkout; this Python's purelib (sysconfig), where the host's packages are
OURS_MODULE = "reference.serve"


class PlanError(ValueError):
    """A plan that cannot run as written."""


@dataclass(frozen=True)
class Bundle:
    """Wheels to install with `pip install --no-index --no-deps --target TARGET`, checked against SHA256SUMS first."""
    name: str
    source: Path  # `from`: the parts (part-*), the chunks they were re-split into (chunk-*), or wheels (*.whl)
    target: Path
    sums: Path  # SHA256SUMS: the parts' or the wheels' digests (default: in `from`)
    incoming: Path | None  # chunks carried in the tree, moved into `from` first (a staging call carries a few)
    part_mib: int | None  # the parts' size, to check chunks (default: MANIFEST.json's part_mib, else 60)
    only: tuple[str, ...]  # file-name patterns of the wheels and Debian packages to install (default: all)
    exclude: tuple[str, ...]
    timeout_s: float

    @property
    def id(self) -> str:
        return f"bundle.{self.name}"

    @property
    def worst_s(self) -> float:
        return self.timeout_s


@dataclass(frozen=True)
class Run:
    """A work item: a command, a Python module or a shell line, with its time limit."""
    name: str
    id: str  # NAME, or SERVER.NAME inside a server
    command: tuple[str, ...] | None  # words, placeholders unfilled; a module is ({python}, -m, MODULE, *args)
    shell: str | None  # or one line for bash -c
    env: dict[str, str]
    pythonpath: tuple[str, ...] | None  # None: the plan's
    timeout_s: float
    grace_s: float  # after stop_signal at the limit, before SIGKILL to its group
    stop_signal: signal.Signals
    on_failure: str  # continue: later steps run; stop: every later step is skipped
    yields: str | None  # a placeholder: the last line it prints

    @property
    def worst_s(self) -> float:
        return self.timeout_s + self.grace_s


@dataclass(frozen=True)
class Server:
    """A server booted as a process group, healthy once GET `health` answers 200, its work items run, then stopped:
    SIGTERM to it, SIGKILL to its group after stop_grace_s."""
    name: str
    command: tuple[str, ...]
    health: str
    env: dict[str, str]
    pythonpath: tuple[str, ...] | None
    boot_timeout_s: float
    stop_grace_s: float
    steps: tuple[Run, ...]

    @property
    def id(self) -> str:
        return self.name

    @property
    def url(self) -> str:
        parts = urlsplit(self.health)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def values(self) -> dict[str, str]:
        parts = urlsplit(self.health)
        return {"url": self.url, "host": parts.hostname or "", "port": str(parts.port or "")}

    @property
    def boot_worst_s(self) -> float:
        """What booting it commits: the boot, its first work item, its stop."""
        return self.boot_timeout_s + (self.steps[0].worst_s if self.steps else 0) + self.stop_grace_s


@dataclass(frozen=True)
class Plan:
    path: Path
    budget_s: float  # the whole sitting, from the tool's start
    reserve_s: float  # kept back for the last stops and the results: no step starts that could end inside it
    env: dict[str, str]
    pythonpath: tuple[str, ...]
    bundles: tuple[Bundle, ...]
    steps: tuple[Run | Server, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.path.stem


# --- reading ----------------------------------------------------------------------------------------------

def _mapping(value, where: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
    if not isinstance(value, dict):
        raise PlanError(f"{where}: a mapping expected, found {value!r}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise PlanError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(value))
    if missing:
        raise PlanError(f"{where}: {', '.join(missing)} missing")
    return value


def _seconds(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise PlanError(f"{where}: a number of seconds above 0 expected, found {value!r}")
    return float(value)


def _name(value, where: str) -> str:
    if not isinstance(value, str) or not value or not set(value) <= NAME_CHARS:
        raise PlanError(f"{where}: a name of letters, digits, '.', '_' and '-' expected, found {value!r}")
    return value


def _words(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = shlex.split(value)
    if not isinstance(value, list) or not value or not all(isinstance(w, (str, int, float)) for w in value):
        raise PlanError(f"{where}: a command line or a list of words expected, found {value!r}")
    return tuple(str(w) for w in value)


def _strings(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(w, (str, int, float)) for w in value):
        raise PlanError(f"{where}: a list expected, found {value!r}")
    return tuple(str(w) for w in value)


def _env(value, where: str) -> dict[str, str]:
    env = value or {}
    if not isinstance(env, dict):
        raise PlanError(f"{where}: a mapping of variables to values expected, found {env!r}")
    if "PYTHONPATH" in env:
        raise PlanError(f"{where}: PYTHONPATH is built from `pythonpath` (docs/sitting.md), not set in env")
    return {str(k): json.dumps(v) if isinstance(v, bool) else str(v) for k, v in env.items()}


def _path(value, where: str, repo: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise PlanError(f"{where}: a path expected, found {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else repo / path


def _bundle(raw, where: str, repo: Path) -> Bundle:
    keys = {"name", "from", "target", "sums", "incoming", "part_mib", "only", "exclude", "timeout_s"}
    raw = _mapping(raw, where, keys, {"name", "from", "target"})
    name = _name(raw["name"], f"{where}.name")
    source = _path(raw["from"], f"{where}.from", repo)
    part_mib = raw.get("part_mib")
    if part_mib is not None and (isinstance(part_mib, bool) or not isinstance(part_mib, int) or part_mib < 1):
        raise PlanError(f"{where}.part_mib: a whole number of MiB expected, found {part_mib!r}")
    return Bundle(name=name, source=source, target=_path(raw["target"], f"{where}.target", repo),
                  sums=_path(raw["sums"], f"{where}.sums", repo) if "sums" in raw else source / "SHA256SUMS",
                  incoming=_path(raw["incoming"], f"{where}.incoming", repo) if "incoming" in raw else None,
                  part_mib=part_mib, only=_strings(raw.get("only", []), f"{where}.only"),
                  exclude=_strings(raw.get("exclude", []), f"{where}.exclude"),
                  timeout_s=_seconds(raw.get("timeout_s", 300), f"{where}.timeout_s"))


def _run(raw, where: str, prefix: str = "") -> Run:
    keys = {"run", "module", "args", "shell", "command", "env", "pythonpath", "timeout_s", "grace_s", "stop_signal",
            "on_failure", "yields"}
    raw = _mapping(raw, where, keys, {"run", "timeout_s"})
    name = _name(raw["run"], f"{where}.run")
    given = [k for k in ("module", "shell", "command") if k in raw]
    if len(given) != 1:
        raise PlanError(f"{where} ({name}): give one of module (with args), shell or command")
    if "args" in raw and "module" not in raw:
        raise PlanError(f"{where} ({name}): args go with module")
    command = shell = None
    if "module" in raw:
        command = ("{python}", "-m", str(raw["module"]), *_strings(raw.get("args", []), f"{where}.args"))
    elif "command" in raw:
        command = _words(raw["command"], f"{where}.command")
    elif not isinstance(raw["shell"], str) or not raw["shell"].strip():
        raise PlanError(f"{where}.shell: a line of shell expected, found {raw['shell']!r}")
    else:
        shell = raw["shell"]
    try:
        stop_signal = signal.Signals["SIG" + str(raw.get("stop_signal", "INT")).upper().removeprefix("SIG")]
    except KeyError:
        raise PlanError(f"{where}.stop_signal: a signal name (INT, TERM) expected, "
                        f"found {raw['stop_signal']!r}") from None
    on_failure = raw.get("on_failure", "continue")
    if on_failure not in ("continue", "stop"):
        raise PlanError(f"{where}.on_failure: continue or stop, found {on_failure!r}")
    yields = raw.get("yields")
    if yields is not None and (not isinstance(yields, str) or not PLACEHOLDER.fullmatch("{" + yields + "}")
                               or yields in BUILTIN + PER_STEP + PER_SERVER or yields.startswith("bundle.")):
        raise PlanError(f"{where}.yields: a placeholder name of its own expected, found {yields!r}")
    return Run(name=name, id=prefix + name, command=command, shell=shell, env=_env(raw.get("env"), f"{where}.env"),
               pythonpath=_strings(raw["pythonpath"], f"{where}.pythonpath") if "pythonpath" in raw else None,
               timeout_s=_seconds(raw["timeout_s"], f"{where}.timeout_s"),
               grace_s=_seconds(raw.get("grace_s", 10), f"{where}.grace_s"), stop_signal=stop_signal,
               on_failure=on_failure, yields=yields)


def ours_command(raw, where: str) -> tuple[tuple[str, ...], str]:
    """Our server's words (python -m reference.serve ...) and its health URL, from the plan's `ours` block."""
    raw = _mapping(raw, where, {"model", "profile", "port", "host", "set", "args"}, {"model", "port"})
    port, host = raw["port"], str(raw.get("host", "127.0.0.1"))
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise PlanError(f"{where}.port: a port number expected, found {port!r}")
    sets = raw.get("set", {})
    if not isinstance(sets, dict):
        raise PlanError(f"{where}.set: a mapping of dotted keys to values expected, found {sets!r}")
    words = ["{python}", "-m", OURS_MODULE, "--model", str(raw["model"]),
             "--profile", str(raw.get("profile", "default")), "--host", host, "--port", str(port)]
    for key, value in sets.items():  # each value as YAML reads it back (reference/deploy/cli.py parse_set)
        words += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    words += _strings(raw.get("args", []), f"{where}.args")
    return tuple(words), f"http://{host}:{port}/health"


def _server(raw, where: str) -> Server:
    keys = {"server", "ours", "command", "health", "env", "pythonpath", "boot_timeout_s", "stop_grace_s", "steps"}
    raw = _mapping(raw, where, keys, {"server", "boot_timeout_s"})
    name = _name(raw["server"], f"{where}.server")
    if ("ours" in raw) == ("command" in raw):
        raise PlanError(f"{where} ({name}): give ours (our server) or command (with health)")
    if "ours" in raw:
        if "health" in raw:
            raise PlanError(f"{where} ({name}): ours has its health URL from its port; health is for a command")
        command, health = ours_command(raw["ours"], f"{where}.ours")
    else:
        if not isinstance(raw.get("health"), str) or not urlsplit(raw["health"]).scheme.startswith("http"):
            raise PlanError(f"{where} ({name}): a command needs health, its http://HOST:PORT/... URL")
        command, health = _words(raw["command"], f"{where}.command"), raw["health"]
    steps = raw.get("steps", [])
    if not isinstance(steps, list):
        raise PlanError(f"{where}.steps: a list of work items (run: NAME) expected")
    runs = tuple(_run(s, f"{where}.steps[{i}]", prefix=f"{name}.") for i, s in enumerate(steps))
    return Server(name=name, command=command, health=health, env=_env(raw.get("env"), f"{where}.env"),
                  pythonpath=_strings(raw["pythonpath"], f"{where}.pythonpath") if "pythonpath" in raw else None,
                  boot_timeout_s=_seconds(raw["boot_timeout_s"], f"{where}.boot_timeout_s"),
                  stop_grace_s=_seconds(raw.get("stop_grace_s", 30), f"{where}.stop_grace_s"), steps=runs)


def _check_names(plan: Plan) -> None:
    seen: set[str] = set()
    for thing in (*plan.bundles, *plan.steps, *(r for s in plan.steps if isinstance(s, Server) for r in s.steps)):
        if thing.id in seen:
            raise PlanError(f"{plan.path}: the name {thing.id} is used twice")
        seen.add(thing.id)


def _check_pythonpath(entries: tuple[str, ...], bundles: set[str], where: str) -> None:
    for entry in entries:
        if "/" not in entry and not entry.startswith("~") and not names(entry) and entry not in bundles | set(
                PYTHONPATH_WORDS):
            raise PlanError(f"{where}: pythonpath entry {entry!r} is no bundle's name, repo, host or path")


def _check_placeholders(plan: Plan) -> None:
    """Every placeholder is filled by the time its step starts: built in, a bundle's target, the server's URL
    inside a server, or the `yields` of a step before it."""
    known = set(BUILTIN) | set(PER_STEP) | {f"bundle.{b.name}" for b in plan.bundles}
    bundle_names = {b.name for b in plan.bundles}
    _check_pythonpath(plan.pythonpath, bundle_names, f"{plan.path}: pythonpath")

    def check(step: Run | Server, extra: set[str]) -> None:
        texts = [*(step.command or ()), *([step.shell] if getattr(step, "shell", None) else []),
                 *step.env.values(), *(step.pythonpath or ())]
        unknown = sorted(set().union(*(names(t) for t in texts)) - known - extra)
        if unknown:
            raise PlanError(f"{plan.path}: step {step.id} uses {', '.join('{' + n + '}' for n in unknown)}, which "
                            "nothing fills before it (built in: " + ", ".join(BUILTIN + PER_STEP) + "; bundle.NAME; "
                            "url, port, host in a server; a `yields` of an earlier step)")
        _check_pythonpath(step.pythonpath or (), bundle_names, f"{plan.path}: step {step.id}")

    for step in plan.steps:
        if isinstance(step, Server):
            check(step, set(PER_SERVER))
            for run in step.steps:
                check(run, set(PER_SERVER))
                if run.yields:
                    known.add(run.yields)
        else:
            check(step, set())
            if step.yields:
                known.add(step.yields)
    unknown_env = sorted(set().union(set(), *(names(v) for v in plan.env.values())) - set(BUILTIN) - {
        f"bundle.{b}" for b in bundle_names})
    if unknown_env:
        raise PlanError(f"{plan.path}: env uses {', '.join(unknown_env)}: the plan's env takes repo, results, python "
                        "and bundle.NAME only")


def parse(raw, path: Path, repo: Path) -> Plan:
    keys = {"budget_s", "reserve_s", "env", "pythonpath", "bundles", "steps"}
    raw = _mapping(raw, str(path), keys, {"budget_s", "steps"})
    bundles = tuple(_bundle(b, f"{path}: bundles[{i}]", repo) for i, b in enumerate(raw.get("bundles") or []))
    if not isinstance(raw["steps"], list) or not raw["steps"]:
        raise PlanError(f"{path}: steps: a list of work items (run: NAME) and servers (server: NAME) expected")
    steps = []
    for i, step in enumerate(raw["steps"]):
        where = f"{path}: steps[{i}]"
        if isinstance(step, dict) and "server" in step:
            steps.append(_server(step, where))
        elif isinstance(step, dict) and "run" in step:
            steps.append(_run(step, where))
        else:
            raise PlanError(f"{where}: a work item (run: NAME) or a server (server: NAME) expected")
    default_path = (*(b.name for b in bundles), *PYTHONPATH_WORDS)
    plan = Plan(path=path, budget_s=_seconds(raw["budget_s"], f"{path}: budget_s"),
                reserve_s=_seconds(raw.get("reserve_s", 10), f"{path}: reserve_s"),
                env=_env(raw.get("env"), f"{path}: env"),
                pythonpath=_strings(raw["pythonpath"], f"{path}: pythonpath") if "pythonpath" in raw else default_path,
                bundles=bundles, steps=tuple(steps))
    if plan.reserve_s >= plan.budget_s:
        raise PlanError(f"{path}: reserve_s ({plan.reserve_s:g}) leaves nothing of budget_s ({plan.budget_s:g})")
    _check_names(plan)
    _check_placeholders(plan)
    return plan


def load(path: Path, repo: Path | None = None) -> Plan:
    """The plan in `path`; relative paths in it are relative to `repo` (default: the working folder)."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise PlanError(f"{path}: {error}") from None
    return parse(raw, Path(path), (repo or Path.cwd()).resolve())
