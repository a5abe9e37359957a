"""Reads kvfuzz check's --junit reports with junitparser, as a CI system would, and checks
what they say (tests/cli/check_junit.sh): check_junit.py EVERY.xml TRACEBACK.xml"""

import sys

from junitparser import Failure, JUnitXml


def fail(message):
    print("check_junit: " + message)
    sys.exit(1)


def suites(path):
    xml = JUnitXml.fromfile(path)  # raises on XML a JUnit parser refuses
    return {suite.name: suite for suite in xml}


def failures(case):
    return [r for r in case.result if isinstance(r, Failure)]


every = suites(sys.argv[1])
if "contiguous" not in every or "mask-origin" not in every:
    fail("every.xml lacks the suites contiguous and mask-origin: " + ", ".join(every))
honest = {case.name: case for case in every["contiguous"]}
for name in ("prefix", "schedule", "layout", "poison", "reset", "batch"):
    if name not in honest:
        fail(f"contiguous has no test case {name}")
    if failures(honest[name]):
        fail(f"contiguous's {name} failed")
mutant = {case.name: case for case in every["mask-origin"]}
if "rejected" not in mutant or failures(mutant["rejected"]):
    fail("mask-origin is not reported as rejected")

traceback = suites(sys.argv[2])
names = [name for name in traceback if name.endswith("# <&\"'>")]
if len(names) != 1:
    fail("the engine's name did not survive escaping: " + ", ".join(traceback))
broken = [f for case in traceback[names[0]] for f in failures(case)]
if not broken:
    fail("the traceback engine has no failure")
text = broken[0].text or ""
if "reproduce: " not in text or "--case-seed" not in text or "fixture: " not in text:
    fail("the failure does not carry the fixture and the reproduction command: " + text)
if "kaboom in step" not in (broken[0].message or "") + text:
    fail("the failure does not carry the engine's error: " + text)
print("check_junit: both reports parse; suites, cases and failures as expected")
