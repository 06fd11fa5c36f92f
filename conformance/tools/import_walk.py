"""Imports every module under some packages, the way a server would meet them, and names each that fails.

    python -m conformance.tools.import_walk sglang_omni.models.higgs_tts sglang_omni.serve ... [--module M ...]

For a bundle that leaves packages out (conformance/tools/bundle.py `--leave-out`): installed on any host, even one
without a GPU, its serving path imports or names the package that must come back, before a GPU sitting is spent on
finding out. A package's modules are walked recursively (pkgutil); `--module` names single modules. Prints one line
per failure (module, exception) and the count imported; exits 1 when any failed.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def walk(packages: list[str], modules: list[str] = ()) -> tuple[int, dict[str, str]]:
    """(modules imported, {module: why it failed}) for every module under `packages`, and `modules`."""
    imported, failed = 0, {}
    todo = list(reversed([*packages, *modules]))
    recurse = set(packages)
    while todo:
        name = todo.pop()
        try:
            module = importlib.import_module(name)
        except BaseException as error:  # noqa: BLE001 - an import may raise anything, SystemExit included
            failed[name] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            continue
        imported += 1
        if name in recurse and hasattr(module, "__path__"):
            children = [info.name for info in pkgutil.iter_modules(module.__path__, name + ".")]
            recurse.update(children)
            todo.extend(reversed(children))
    return imported, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.tools.import_walk", description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", help="packages whose modules are all imported")
    parser.add_argument("--module", dest="modules", action="append", default=[], help="one module more")
    args = parser.parse_args(argv)
    imported, failed = walk(args.packages, args.modules)
    for name, why in failed.items():
        print(f"FAILED {name}: {why}")
    print(f"import_walk: {imported} modules imported, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
