"""The suite's time against its budget, and its slowest tests, from the JUnit files `make test`
writes (one per phase). Past the budget it warns; CI's own limit is the hard one."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

BUDGET_MINUTES = 30
SLOWEST = 15


def main(folder: str) -> int:
    phases, cases = [], []
    for path in sorted(Path(folder).glob("junit*.xml")):
        root = ET.parse(path).getroot()
        for suite in root.iter("testsuite"):
            phases.append((path.name, float(suite.get("time", 0)), int(suite.get("tests", 0))))
        cases += [(float(c.get("time", 0)), f"{c.get('classname')}::{c.get('name')}") for c in root.iter("testcase")]
    if not phases:
        print(f"suite time: no JUnit file under {folder}")
        return 0
    total = sum(seconds for _, seconds, _ in phases) / 60
    print("\nslowest tests:")
    for seconds, name in sorted(cases, reverse=True)[:SLOWEST]:
        print(f"  {seconds:7.1f} s  {name}")
    detail = ", ".join(f"{name} {seconds / 60:.1f} min ({tests} tests)" for name, seconds, tests in phases)
    print(f"\nsuite time: {total:.1f} min of its {BUDGET_MINUTES}-minute budget ({detail})")
    if total > BUDGET_MINUTES:
        print(f"WARNING: the suite took {total - BUDGET_MINUTES:.1f} min past its budget: shorten or share "
              "the slowest tests above (docs: development and tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".local/test-output"))
