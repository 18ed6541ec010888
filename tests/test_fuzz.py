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


def test_hostile_output_paths_and_side_files_keep_the_property(tmp_path):
    """Output options at, inside and above the model, FIFOs, ``..``, symlinks, --force, hostile --costs files."""
    codes, problems, _, kinds = fuzzing.run(150, seed=20261128, workdir=tmp_path, surfaces=True)
    assert codes[0] > 0 and codes[2] > 0, codes
    assert any("input" in kind for kind in kinds), kinds  # the output guard was reached
    assert not problems, "\n".join(
        f"#{i} {what}: msopt {' '.join(args)}: {problem}" for i, what, args, problem in problems[:20]
    )
