"""Run the fuzz property of tests/test_fuzz.py over many variants (default 10,000) and print the counts.

python bench/fuzz.py [--count N] [--seed S] [--surfaces]

--surfaces also points output options at the model, inside it, at its folder and above, at FIFOs, through
``..`` and symlinks, with and without --force, and passes hostile --costs/--host-profile files.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzzing  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--surfaces", action="store_true", help="hostile output paths and side files too")
    args = parser.parse_args()
    last = [time.perf_counter()]

    def progress(done, codes):
        if time.perf_counter() - last[0] > 30 or done == args.count:
            last[0] = time.perf_counter()
            print(f"  {done:,} variants: {dict(sorted(codes.items(), key=str))}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="msopt-fuzz-") as tmp:
        codes, problems, seconds, kinds = fuzzing.run(args.count, args.seed, tmp, progress, args.surfaces)
    print(
        f"fuzz: {args.count:,} variants, seed {args.seed}, {seconds:.0f} s ({seconds / args.count * 1000:.0f} ms each)"
    )
    for code, n in sorted(codes.items(), key=str):
        print(f"  exit {code}: {n:,}")
    seconds_one, argv = fuzzing.run.slowest
    print(f"  slowest: {seconds_one:.2f} s: msopt {' '.join(argv)}")
    print("  most frequent refusals (exit 2):")
    for kind, n in kinds.most_common(15):
        print(f"    {n:6,}  {kind}")
    print(f"  property violations: {len(problems)}")
    for index, description, argv, problem in problems[:50]:
        print(f"    #{index} {description}: msopt {' '.join(argv[:1])} ...: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
