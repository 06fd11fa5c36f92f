"""The rule tables of config resolution are in the order cases/profiles/precedence.yaml states."""

import pytest

from conformance.case_files import load
from reference.deploy.platform_matrix import RUNNER_RULES
from reference.deploy.precedence import PRECEDENCE

pytestmark = pytest.mark.cpu


def test_deploy_rule_order():
    assert [r.name for r in PRECEDENCE] == [r["name"] for r in load("profiles/precedence")["deploy_rules"]]


def test_runner_rule_order():
    assert [r.name for r in RUNNER_RULES] == [r["name"] for r in load("profiles/precedence")["runner_rules"]]
