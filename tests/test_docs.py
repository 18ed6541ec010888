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


def test_the_architecture_lists_every_module_once_and_nothing_else():
    """docs/ARCHITECTURE.md's module list ("- `msopt/<folder>/`: `a.py`, `b.py`") names every .py file under
    msopt/ exactly once; every msopt/ path the document names anywhere exists."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    listed = []
    for folder, modules in re.findall(r"(?m)^- `(msopt/(?:[\w/]+/)?)`: (.+)$", text):
        listed += [folder + name for name in re.findall(r"`([\w]+\.py)`", modules)]
    tree = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "msopt").rglob("*.py") if "__pycache__" not in p.parts)
    assert sorted(listed) == tree
    assert len(listed) == len(set(listed)), "a module listed twice"
    for path in set(re.findall(r"`(msopt/[\w/]*\w(?:\.py)?/?)`", text)):
        if "<" not in path and path != "msopt/_loops":  # the prebuilt extension, msopt/_loops*.so once built
            assert (ROOT / path).exists(), f"ARCHITECTURE.md names {path}, which does not exist"
