"""Fuzz: 300 seeded mutations of the sample models through the proto-only commands keep the bad-input property."""

import fuzzing

VARIANTS = 300


def test_mutated_models_exit_0_or_2_with_one_line_and_leave_no_trace(tmp_path):
    codes, problems, _, _ = fuzzing.run(VARIANTS, seed=20261123, workdir=tmp_path)
    assert sum(codes.values()) == VARIANTS
    assert codes[0] > 0 and codes[2] > 0, codes  # mutations both survive and get refused: the run tests something
    assert not problems, "\n".join(
        f"#{i} {what}: msopt {' '.join(args)}: {problem}" for i, what, args, problem in problems[:20]
    )
