"""Did a pytest run really test something? Reads its ``--junitxml`` report and fails (exit 1) when no test passed,
or when a test or a whole file was skipped for a reason not explicitly allowed (``--allow-skip SUBSTRING``).

pytest exits 0 for a run whose every test skipped (a missing optional package, a module-level importorskip), so
its exit status alone cannot tell a CI that the suite ran; the report can.

    python .ci/junit_check.py REPORT.xml [--allow-skip TEXT ...]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="the --junitxml file of the run")
    ap.add_argument("--allow-skip", action="append", default=[], metavar="TEXT",
                    help="a skip whose message contains TEXT is acceptable (repeatable)")
    args = ap.parse_args(argv)
    cases = ET.parse(args.report).getroot().iter("testcase")
    passed, bad, allowed, failed = 0, [], [], 0
    for case in cases:
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif skipped is not None:
            message = " ".join(filter(None, [skipped.get("message"), (skipped.text or "").strip()]))
            (allowed if any(a in message for a in args.allow_skip) else bad).append(f"{name}: {message.strip()}")
        else:
            passed += 1
    print(f"junit_check: {passed} passed, {failed} failed, {len(allowed)} skipped as allowed, {len(bad)} skipped "
          f"otherwise ({args.report})")
    for line in allowed:
        print(f"  allowed skip  {line}")
    for line in bad:
        print(f"  SKIPPED       {line}")
    if passed == 0:
        print("junit_check: no test passed: the suite did not run")
        return 1
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
