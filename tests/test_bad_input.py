"""Bad input across the public API: one table, one clear error per case.

Every row calls one public function (a method's API, a loader, the run machinery) with
one bad argument and asserts the exception type and a message fragment that names the
argument (and, where useful, the value or the expectation). The checks run at the
Python boundary, before any tracing or compute, so they cost nothing under `jit`.
"""

import dataclasses
from typing import Any, Callable

import pytest


@dataclasses.dataclass(frozen=True)
class Case:
  name: str                    # the test id: <module>/<what is wrong>
  call: Callable[[], Any]      # calls the public function with the bad input
  error: type                  # the exception type expected
  match: str                   # a regex fragment of the message (names the argument)


CASES: list[Case] = [
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input_gets_a_clear_error(case):
  with pytest.raises(case.error, match=case.match):
    case.call()


def test_the_table_is_large_and_names_are_unique():
  names = [c.name for c in CASES]
  assert len(names) == len(set(names))
