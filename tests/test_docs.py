"""The documentation stays true to the code: generated tables current, links resolve, README short."""

import re
import subprocess
import sys

from conftest import ROOT


def test_policy_table_is_generated_from_the_registry():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    from msopt.rules import POLICIES

    reference = (ROOT / "docs" / "reference.md").read_text()
    for name in POLICIES:
        assert f"| `{name}` |" in reference


def test_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if target.startswith("http"):
                continue
            assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"
