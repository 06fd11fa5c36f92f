"""The differential results as text: `python -m conformance.differential.report` prints the table.

An adapter ends with `print_and_exit_status(implementation)`: its column, judged against the pins,
and exit status 1 when a check differs in a way nobody pinned (a new disagreement: a defect here,
or an upstream difference to record in conformance/cases/differential/pinned.yaml with its
source), 0 otherwise.
"""

from __future__ import annotations

import sys

from conformance.differential.verdicts import CHECKS, NEW, judge, read_pins, read_results, table


def print_and_exit_status(implementation: str) -> int:
    doc = read_results(implementation)
    if doc is None:
        print(f"no results for {implementation}")
        return 1
    pins = read_pins()
    print(f"== differential: {implementation} ({', '.join(f'{k} {v}' for k, v in doc['versions'].items())}) ==")
    new = 0
    for check in sorted(doc["checks"], key=lambda c: CHECKS.index(c["check"])):
        status, why = judge(implementation, check, pins)
        new += status == NEW
        print(f"{check['check']:<16} {status:<16} {why}")
        for case in check["cases"]:
            if not case["equal"]:
                print(f"    {case['id']}: {case['difference']}: {case['detail']}")
    print(f"{'RED' if new else 'GREEN'}: {new} check(s) differ in a way nobody pinned")
    return 1 if new else 0


if __name__ == "__main__":
    print("\n".join(table()))
    sys.exit(0)
