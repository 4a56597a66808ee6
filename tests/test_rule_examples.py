"""Every rule's VALID/INVALID examples, as in Fixit: a test per example, for free."""

import pytest

from xlalint.rules import ALL_RULES
from xlalint.testing import check_case, rule_cases


@pytest.mark.parametrize("rule, case", list(rule_cases(ALL_RULES)))
def test_rule_example(rule, case):
    check_case(rule, case)
