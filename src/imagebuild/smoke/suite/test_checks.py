"""Every check of the probe's table (probe/table.py CHECKS), one test each, generated from the rows (conftest's
pytest_generate_tests): the check's status from the probe of its row's place is the test's outcome, its reason the
test's. A check a hand-written test asserts more about (`pytest.mark.asserts(NAME)`) has that test instead.

And per place a probe runs: every check it reports has a row. A check no row names (a new probe function without
its row, a section that crashed: `SECTION.probe`) would otherwise be reported and asserted by nobody."""

from __future__ import annotations

from typing import Any

import pytest


def test_check(check: Any, check_row: Any) -> None:
    check()


def test_reported_checks_have_rows(smoke: Any, probe_lib: Any, place: str) -> None:
    doc, _ = smoke.place_doc(place, not_run=lambda why, **_: pytest.skip(f"{why} (its checks fail saying so)"))
    ran = set(doc.get("probe", {}).get("sections", []))
    unclaimed = [c for c in doc.get("checks", []) if (row := probe_lib.check_row(c["name"])) is None
                 or row.section not in ran]
    if unclaimed:
        pytest.fail(f"the {place} probe reported {len(unclaimed)} check(s) no row of probe/table.py names for its "
                    "sections: " + "; ".join(f"{c['name']} ({c['status']}: {c.get('reason', '')[:200]})"
                                             for c in unclaimed), pytrace=False)
