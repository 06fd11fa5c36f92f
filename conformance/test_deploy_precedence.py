"""The rule tables of config resolution are in the order cases/profiles/precedence.yaml states,
and every case file of this suite follows the case conventions."""

import pytest

from conformance.deploy_cases import SECTIONS, check_file, load_file
from reference.deploy.resolve import PRECEDENCE
from reference.deploy.platform_matrix import RUNNER_RULES

pytestmark = pytest.mark.cpu


def test_deploy_rule_order():
    assert [r.name for r in PRECEDENCE] == [r["name"] for r in load_file("precedence.yaml")["deploy_rules"]]


def test_runner_rule_order():
    assert [r.name for r in RUNNER_RULES] == [r["name"] for r in load_file("precedence.yaml")["runner_rules"]]


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_case_file_conventions(name):
    check_file(name)
