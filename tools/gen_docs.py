"""Regenerate the tables of the docs that are generated from the code (the policy table of docs/reference.md).

Usage: python tools/gen_docs.py [--check]   (--check: exit 1 if a generated table is out of date)
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msopt.rules import POLICIES  # noqa: E402

BEGIN, END = "<!-- policies:begin -->", "<!-- policies:end -->"


def policy_table():
    rows = ["| policy | what it does | module |", "| --- | --- | --- |"]
    for name, (module, function, description) in POLICIES.items():
        rows.append(f"| `{name}` | {description} | `{module}.{function}` |")
    return "\n".join(rows)


def regenerate(text):
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{policy_table()}\n{END}{tail}"


def main(argv):
    path = ROOT / "docs" / "reference.md"
    text = path.read_text()
    new = regenerate(text)
    if "--check" in argv:
        if new != text:
            print(f"{path.relative_to(ROOT)} is out of date: run python tools/gen_docs.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
