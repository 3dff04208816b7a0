"""The Python rules on the shared scenarios (the Spark rules meet the same ones in tests/spark)."""
import pytest

from rule_cases import CASES, python_visible


@pytest.mark.parametrize("name", CASES)
def test_the_python_rules_give_what_users_must_see(name):
    log, chunks, expected = CASES[name]
    assert python_visible(log, chunks) == expected
