"""Rules files are bounded data (UTF-8, no tags, shallow, small, regexes time-bound); usage errors are one line."""

import bad_inputs
import pytest
from bad_inputs import cli
from conftest import SAMPLES

from msopt.commands.partition import MAX_WARNINGS
from msopt.errors import InputError
from msopt.rules import manual as manual_module

TOWERS = SAMPLES / "towers_tf1"


def partition_with_rules(tmp_path, rules, *extra):
    return cli("partition", TOWERS, "--streams", 2, "--rules", rules, "-o", tmp_path / "out", *extra)


def one_error_line(code, stdout, stderr, *words):
    assert code == 2, (code, stderr)
    assert len(stderr) == 1 and stderr[0].startswith("msopt: error: "), stderr
    assert "internal error" not in stderr[0] and stdout == ""
    for word in words:
        assert word in stderr[0], (word, stderr[0])


@pytest.mark.parametrize(
    "name, words",
    [
        ("nonutf8.yaml", [":2:", "not UTF-8"]),
        ("utf16.yaml", ["UTF-16"]),
        ("pyname.yaml", [":3:", "!!python/name:os.system", "not allowed"]),
        ("inttag.yaml", [":3:", "!!int", "not allowed"]),
        ("nest.yaml", [":1:", "nesting deeper"]),
        ("nul.yaml", [":2:", "NUL byte"]),
    ],
)
def test_bad_rules_file(tmp_path, name, words):
    path = bad_inputs.rules_file(tmp_path, name, bad_inputs.RULES[name])
    one_error_line(*partition_with_rules(tmp_path, path), name, *words)
    assert not (tmp_path / "out").exists()


def test_huge_integer_stream(tmp_path):
    path = bad_inputs.rules_file(tmp_path, "big_int.yaml", "rules:\n  - op: MatMul\n    stream: " + "9" * 5000 + "\n")
    one_error_line(*partition_with_rules(tmp_path, path), "big_int.yaml:3", "'stream'")


def test_oversized_rules_file_is_refused_at_once(tmp_path):
    """515k rules (50 MB) used to take minutes and 2 GB: the size is bounded with a clear error."""
    path = bad_inputs.rules_file(tmp_path, "big.yaml", bad_inputs.many_rules(30_000))
    assert path.stat().st_size > manual_module.MAX_BYTES
    one_error_line(*partition_with_rules(tmp_path, path), "big.yaml", "larger than")


def test_too_many_rules(tmp_path):
    text = "rules:\n" + "".join(f"- {{op: A{i}, stream: 1}}\n" for i in range(manual_module.MAX_RULES + 1))
    path = bad_inputs.rules_file(tmp_path, "many.yaml", text)
    assert path.stat().st_size <= manual_module.MAX_BYTES
    one_error_line(*partition_with_rules(tmp_path, path), "many.yaml", f"{manual_module.MAX_RULES + 1} rules")


def test_catastrophic_pattern_of_re_runs_fast(tmp_path):
    """`(.*)*x` hangs Python's re on a long name that ends in no x; the regex engine answers at once."""
    path = bad_inputs.rules_file(tmp_path, "redos.yaml", 'rules:\n  - match: "(.*)*x"\n    stream: 1\n')
    code, _, stderr = partition_with_rules(tmp_path, path)
    assert code == 0, stderr


def test_regex_over_its_time_bound_names_rule_and_node(tmp_path):
    path = bad_inputs.rules_file(tmp_path, "slow.yaml", 'rules:\n  - match: "(?:.*){1,40}\\\\d"\n    stream: 1\n')
    one_error_line(*partition_with_rules(tmp_path, path), "rule 1", "slow.yaml:2", "node '", "regex ran over")


def test_unmatched_rule_warnings_are_capped(tmp_path):
    path = bad_inputs.rules_file(
        tmp_path,
        "unmatched.yaml",
        "rules:\n  - scope: tower_1/\n    stream: 1\n" + bad_inputs.many_rules(40).split("\n", 1)[1],
    )
    code, stdout, stderr = partition_with_rules(tmp_path, path)
    assert code == 0, stderr
    warnings = [line for line in stderr if line.startswith("msopt: warning:")]
    assert len(warnings) == MAX_WARNINGS + 1 and warnings[-1].endswith(
        f"... and {40 - MAX_WARNINGS} more rules that matched no node"
    )
    assert stdout.count("matched no node") == MAX_WARNINGS + 1


@pytest.mark.parametrize(
    "args, words",
    [
        (["partition", TOWERS, "--streams", 0], ["'--streams'", "0 is not in the range"]),
        (["partition", TOWERS, "--rules", SAMPLES], ["'--rules'", "is a directory"]),
        (["run", TOWERS, "--inputs", SAMPLES], ["'--inputs'", "is a directory"]),
        (["inspect", TOWERS, "--bogus"], ["No such option '--bogus'", "msopt inspect --help"]),
        (
            ["simulate", TOWERS, "--bogus"],
            ["No such option '--bogus'", "msopt simulate --help"],
        ),  # a lazily loaded command
        (["--bogus"], ["No such option '--bogus'"]),
        (["nosuchcommand"], ["No such command 'nosuchcommand'"]),
        (["inspect"], ["Missing argument 'MODEL'"]),
    ],
)
def test_usage_error_is_one_line(args, words):
    one_error_line(*cli(*args), *words)


def test_usage_error_from_the_real_command_line(msopt):
    result = msopt("partition", TOWERS, "--streams", 0)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        "msopt: error: Invalid value for '--streams' / '-n': 0 is not in the range 1<=x<=1024. (see 'msopt partition --help')"
    ]


# -- other files the user names ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, data, words",
    [
        ("deep.json", b"[" * 100_000, ["nests too deep"]),
        ("utf16.json", '{"ops": {}}'.encode("utf-16"), ["not JSON text"]),
        ("huge.json", b'{"ops": {"MatMul": 1' + b"0" * 400 + b"}}", ["op 'MatMul'", "non-negative numbers"]),
    ],
)
def test_bad_costs_file(tmp_path, name, data, words):
    path = bad_inputs.rules_file(tmp_path, name, data)
    one_error_line(*cli("simulate", SAMPLES / "linreg_frozen.pb", "--costs", path), name, *words)


def test_batch_size_beyond_any_figure():
    one_error_line(*cli("simulate", SAMPLES / "linreg_frozen.pb", "--batch-size", 10**400), "--batch-size")


def test_unwritable_timeline_path(tmp_path):
    one_error_line(
        *cli("simulate", SAMPLES / "linreg_frozen.pb", "--timeline", tmp_path / "no" / "t.json"),
        str(tmp_path / "no" / "t.json"),
        "No such file or directory",
    )


@pytest.mark.parametrize(
    "value,ok",
    [
        (0, True),
        (3, True),
        (True, True),
        (4, False),
        (-1, False),
        (1.0, False),
        ("1", False),
        (2**70, False),
        (None, False),
    ],
)
def test_stream_range_check_names_the_first_node_outside(value, ok):
    """check_range's quick path (types in one pass, bounds on an array) and its loop agree: the plan passes, or the
    error names the first node outside [0, streams)."""
    import numpy as np

    from msopt.planning.partition import check_range

    plan = {f"n{i}": i % 4 for i in range(50)} | {"odd": value, "last": 0}
    if ok:
        check_range(plan, 4)
    else:
        with pytest.raises(InputError, match=r"node 'odd' gets stream .* outside \[0, 4\)"):
            check_range(plan, 4)
    with pytest.raises(InputError, match="node 'n1' gets stream 1 "):
        check_range({"n0": 0, "n1": np.int64(1)}, 4)  # not a plain int
    check_range({}, 1)
