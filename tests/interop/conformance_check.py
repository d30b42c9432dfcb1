"""Judges one run of the MCP conformance suite against its expected-failures file.

The suite's own baseline check counts a warning as a failure, so a scenario that passes with a
warning (one that wants a fixture tool only for an optional check) could neither be listed nor
left out. This check reads the results instead: a check fails when its status is FAILURE, and
a scenario fails when one of its checks does. The file lists what must fail, each entry with a
`# reason`: `scenario` (the scenario must fail) or `scenario:check-id` (that check must fail).
The run fails on any failure not listed, on any listed entry that did not fail (a stale entry
would hide a regression), on an entry naming nothing that ran, and when fewer scenarios left
results than the suite announced.

Usage: conformance_check.py EXPECTED_FAILURES.yml RESULTS_DIR SUITE_LOG LABEL
"""

import json
import pathlib
import re
import sys


def expected_entries(path):
    entries = {}
    for number, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        match = re.match(r"^\s*-\s*([\w.:-]+)\s*(#\s*(.*))?$", line)
        if not match:
            continue
        if not (match.group(3) or "").strip():
            sys.exit(f"{path}:{number}: every expected failure needs a `# reason`")
        entries[match.group(1)] = match.group(3).strip()
    return entries


def results(directory):
    """{scenario: [(check id, status, message)]}, from each `server-<scenario>-<timestamp>/checks.json`."""
    scenarios = {}
    for checks in sorted(pathlib.Path(directory).glob("*/checks.json")):
        name = re.sub(r"^server-", "", checks.parent.name)
        name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", name)
        scenarios[name] = [(c["id"], c["status"], c.get("errorMessage") or "") for c in json.loads(checks.read_text())]
    return scenarios


def main():
    expected_path, directory, log, label = sys.argv[1:5]
    expected = expected_entries(expected_path)
    scenarios = results(directory)
    announced = re.search(r"\((\d+) scenarios\)", pathlib.Path(log).read_text())
    problems = []
    if not announced or int(announced.group(1)) != len(scenarios):
        problems.append(f"the suite announced {announced and announced.group(1)} scenarios, {len(scenarios)} left results")

    for entry in expected:
        scenario, _, check = entry.partition(":")
        checks = scenarios.get(scenario)
        if checks is None or (check and check not in [c[0] for c in checks]):
            problems.append(f"unknown entry {entry}: nothing of that name ran")
        elif not any(status == "FAILURE" and (not check or check == id_) for id_, status, _ in checks):
            problems.append(f"unexpected pass {entry}: remove it from {pathlib.Path(expected_path).name}")

    passed = 0
    for scenario, checks in sorted(scenarios.items()):
        failures = [(id_, message) for id_, status, message in checks if status == "FAILURE"]
        unexplained = [(id_, message) for id_, message in failures
                       if scenario not in expected and f"{scenario}:{id_}" not in expected]
        for id_, message in unexplained:
            problems.append(f"unexpected failure {scenario}:{id_}: {message[:200]}")
        warnings = [id_ for id_, status, _ in checks if status == "WARNING"]
        passed += not failures
        note = f" (warnings: {', '.join(warnings)})" if warnings else ""
        state = "pass" if not failures else "expected failure" if not unexplained else "FAIL"
        print(f"  {state:16} {scenario}{note}")

    print(f"conformance {label}: {passed} of {len(scenarios)} scenarios pass; the other {len(scenarios) - passed} "
          f"fail only where {pathlib.Path(expected_path).name} expects it" if not problems else
          f"conformance {label}: {passed} of {len(scenarios)} scenarios pass")
    if problems:
        print("\n".join(f"conformance {label}: {problem}" for problem in problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
