"""`python -m reference.deploy.check_profiles` (tox -e sanity): every shipped profile, with its
base_config chain, against the format's JSON Schema (reference/deploy/schema.json)."""

from __future__ import annotations

import sys

from reference.deploy.loader import PROFILES_DIR, load_chain
from reference.deploy.schema import DeployFileError


def main() -> int:
    profiles = sorted(PROFILES_DIR.glob("*.yaml"))
    problems = []
    for path in profiles:
        try:
            load_chain(path)
        except DeployFileError as exc:
            problems.append(str(exc))
    for line in problems:
        print(line, file=sys.stderr)
    print(f"{len(profiles)} deploy profiles: {'all valid' if not problems else f'{len(problems)} invalid'}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
