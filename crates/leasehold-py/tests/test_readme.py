"""The README's and the Python guide's examples run, against a real Redis (the harness's redis 8)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT, server_url


def python_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run_blocks(blocks: list[str], source: str) -> None:
    url = server_url("redis8")
    for code in blocks:
        exec(compile(code.replace("redis://127.0.0.1:6379/", url), source, "exec"), {})


def test_the_readme_python_examples_run() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    run_blocks(blocks, "README.md")


def test_the_python_guide_examples_run() -> None:
    guide = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert len(blocks) >= 2
    run_blocks(blocks, "docs/python.md")


def test_the_readme_names_the_test_file_it_cites() -> None:
    assert (Path(__file__).parent / "test_interop.py").exists()
