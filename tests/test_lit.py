"""Runs the lit suite under pytest, one pytest item per lit test file, so
that one test command reports everything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

LIT_DIR = Path(__file__).parent / "lit"
TESTS = sorted(
    p.relative_to(LIT_DIR).as_posix()
    for p in LIT_DIR.rglob("*.mlir")
    if "Inputs" not in p.parts and "Output" not in p.parts
)


@pytest.fixture(scope="session")
def lit_results(tmp_path_factory) -> dict[str, tuple[bool, str]]:
    xml = tmp_path_factory.mktemp("lit") / "lit.xml"
    cmd = [shutil.which("lit") or "lit", "-q", f"--xunit-xml-output={xml}", str(LIT_DIR)]
    if os.cpu_count():
        cmd.append(f"-j{os.cpu_count()}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not xml.exists():
        pytest.fail(f"lit did not run:\n{proc.stdout}\n{proc.stderr}")
    results: dict[str, tuple[bool, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        # classname is "<suite>.<dir.parts>", name the file name
        parts = case.get("classname", "").split(".")[1:]
        name = "/".join([*parts, case.get("name", "")])
        failure = case.find("failure")
        results[name] = (failure is None, failure.text if failure is not None else "")
    return results


@pytest.mark.parametrize("test", TESTS)
def test_lit(test: str, lit_results: dict[str, tuple[bool, str]]) -> None:
    entry = lit_results.get(test)
    assert entry is not None, f"lit did not run {test}"
    ok, output = entry
    assert ok, output
