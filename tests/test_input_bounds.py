"""Every input file is read with a bound: devices, FIFOs and /proc refused unopened, sizes and numbers checked, npz
headers checked before any array is decompressed, rules' regexes sized before compiling and matched in one budget.

The reproducers are rebuilt here as they were found (a fuzzing pass): the same text, the same zip layout and
sizes. Each hostile case runs as its own process under a wrapper that reports its wall time and peak memory.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import types
import zipfile
import zlib

import numpy as np
import pytest
from conftest import SAMPLES

from msopt.errors import InputError
from msopt.files import inputs, reading
from msopt.files.inputs import read_npz
from msopt.rules.patterns import MAX_GROUP_DEPTH, MAX_PATTERN_SIZE, PatternError, Patterns, unrolled_size
from msopt.simulator.cost import load_costs
from msopt.simulator.host_model import load_host_profile

LINREG = SAMPLES / "linreg_tf1"
TOWERS = SAMPLES / "towers_tf1"
SPEC = {"X": {"dtype": "float", "shape": [None, 1]}, "Y": {"dtype": "float", "shape": [None, 1]}}
TIMEOUT_S = 60
PEAK_MIB = 1024  # every refusal here happens before the input is read: a fresh msopt process stays far below
ADDRESS_LIMIT = 8 << 30  # a safety net for the machine should a bound regress (not for TensorFlow's processes)

# Runs one command, then prints its exit code, stderr, wall time and peak RSS (of that process alone) as JSON.
WRAPPER = """
import json, resource, subprocess, sys, time
limit, timeout = int(sys.argv[1]), float(sys.argv[2])
def cap():
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
start = time.monotonic()
try:
    done = subprocess.run(sys.argv[3:], capture_output=True, text=True, timeout=timeout, preexec_fn=cap)
    code, out, err = done.returncode, done.stdout, done.stderr
except subprocess.TimeoutExpired:
    code, out, err = "timeout", "", ""
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"code": code, "stdout": out, "stderr": err, "seconds": time.monotonic() - start, "peak_mib": peak}))
"""


def measured(*command, tf=False):
    """{code, stdout, stderr, seconds, peak_mib} of ``command`` run under WRAPPER with TIMEOUT_S."""
    limit = 0 if tf else ADDRESS_LIMIT
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(limit), str(TIMEOUT_S), *map(str, command)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S + 60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def msopt_measured(*args, tf=False):
    return measured(sys.executable, "-m", "msopt", *args, tf=tf)


def assert_refused(result, *words, code=2):
    """One line ``msopt: error: ...`` holding ``words``, exit ``code``, in bounded time and memory."""
    assert result["code"] == code, result
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("msopt: error: "), result["stderr"]
    assert "internal error" not in lines[0] and "Traceback" not in result["stderr"] and result["stdout"] == ""
    for word in words:
        assert str(word) in lines[0], (word, lines[0])
    assert result["seconds"] < TIMEOUT_S and result["peak_mib"] < PEAK_MIB, result


# -- side files naming what is not a regular file ----------------------------------------------------------------
SIDE_COMMANDS = {
    "--costs": ["simulate", LINREG, "-n", 2],
    "--host-profile": ["simulate", LINREG, "-n", 2],
    "--rules": ["partition", TOWERS, "-n", 2],
}


def side_command(option, path, tmp_path):
    extra = ["-o", tmp_path / "out"] if option == "--rules" else []
    return [*SIDE_COMMANDS[option], option, path, *extra]


@pytest.mark.parametrize("option", sorted(SIDE_COMMANDS))
@pytest.mark.parametrize("kind", ["dev_zero_symlink", "fifo"])
def test_a_side_file_that_is_a_device_or_a_fifo_is_refused_unopened(option, kind, tmp_path):
    """A symlink to /dev/zero took over 6 GB in 7 s; a FIFO blocked forever."""
    path = tmp_path / "side.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    result = msopt_measured(*side_command(option, path, tmp_path))
    assert_refused(result, path, "FIFO" if kind == "fifo" else "character device", "regular files only")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", sorted(SIDE_COMMANDS))
def test_a_side_file_under_proc_is_refused_even_through_a_symlink(option, tmp_path):
    path = tmp_path / "side.json"
    path.symlink_to("/proc/self/status")
    assert_refused(msopt_measured(*side_command(option, path, tmp_path)), path, "kernel file under /proc")


@pytest.mark.parametrize("kind", ["dev_zero_symlink", "fifo"])
def test_a_model_file_that_is_a_device_or_a_fifo_is_refused_unopened(kind, tmp_path):
    path = tmp_path / "frozen.pb"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    for command in (["inspect", path], ["partition", path, "-n", 2, "-o", tmp_path / "out.pb"]):
        result = msopt_measured(*command)
        assert_refused(result, path, "FIFO" if kind == "fifo" else "character device", "regular files only")
    assert not (tmp_path / "out.pb").exists()


def test_a_negative_seed_is_a_usage_error():
    result = msopt_measured("run", LINREG, "--device", "cpu", "--seed", -1)
    assert_refused(result, "--seed", "-1")


def test_directories_and_sockets_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load_costs(tmp_path)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "s.json"))
        with pytest.raises(InputError, match="is a socket"):
            load_host_profile(tmp_path / "s.json")
    finally:
        server.close()


@pytest.mark.parametrize(
    "reader, limit", [(load_costs, reading.MAX_COSTS_BYTES), (load_host_profile, reading.MAX_HOST_PROFILE_BYTES)]
)
def test_a_file_over_its_limit_is_refused_by_its_size_before_it_is_read(reader, limit, tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(limit + 1)  # sparse: reading it would take the time the size check saves
    with pytest.raises(InputError, match=f"larger than {reading.size_text(limit)}"):
        reader(path)


def test_a_file_lying_about_its_size_is_read_with_at_most_one_byte_over_the_limit(tmp_path, monkeypatch):
    """As a file that grows while it is read: fstat says 10 bytes, the file holds 3 MiB."""
    path = tmp_path / "grows.json"
    path.write_bytes(b" " * (3 << 20))
    reads = []

    class Counting:
        """The reader's file, counting the bytes each read asks for."""

        def __init__(self, f):
            self.f = f

        def read(self, n):
            reads.append(n)
            return self.f.read(n)

        def fileno(self):
            return self.f.fileno()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    fake_os = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os) if not name.startswith("__")})
    fake_os.fstat = lambda fd: os.stat_result((*os.fstat(fd)[:6], 10, *os.fstat(fd)[7:10]))
    fake_os.fdopen = lambda fd, mode: Counting(os.fdopen(fd, mode))
    monkeypatch.setattr(reading, "os", fake_os)
    with pytest.raises(InputError, match="grew while it was read"):
        reading.read_bytes(path, "host profile", 1 << 20)
    assert sum(reads) == (1 << 20) + 1 and reads[0] == 11


# -- JSON numbers ---------------------------------------------------------------------------------------------
COSTS_REPRODUCERS = {
    "co_unit_list.json": ('{"unit": ["us"], "ops": {}}', ["unknown unit", "a JSON array"]),
    "co_unit_obj.json": ('{"unit": {"a": 1}, "ops": {}}', ["unknown unit", "a JSON object"]),
    "co_huge_us.json": (None, ["op '", "1e+308", "at most 1e+09 us"]),
}


def huge_costs():
    """Every node of linreg_tf1 at 1e308 us (the simulation used to stall on them)."""
    from msopt.graph.view import GraphView
    from msopt.load import load

    keys = [node.key for node in GraphView(load(LINREG).graph_def).real_nodes()]
    return json.dumps({"unit": "us", "ops": dict.fromkeys(keys, 1e308)})


@pytest.mark.parametrize("name", sorted(COSTS_REPRODUCERS))
def test_costs_reproducers_are_one_line_naming_the_field(name, tmp_path):
    text, words = COSTS_REPRODUCERS[name]
    path = tmp_path / name
    path.write_text(text if text is not None else huge_costs())
    assert_refused(msopt_measured("simulate", LINREG, "-n", 2, "--costs", path), path, *words)


def test_host_profile_with_a_5000_digit_integer_is_one_line_naming_the_field(tmp_path):
    path = tmp_path / "hp_bigint5000.json"
    path.write_text('{"launch_threads": ' + "9" * 5000 + "}")
    result = msopt_measured("simulate", LINREG, "-n", 2, "--host-profile", path)
    assert_refused(result, path, "'launch_threads'", "5000 digits")


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"ops": {"MatMul": NaN}}', ["op 'MatMul' has time NaN"]),
        ('{"ops": {"MatMul": -Infinity}}', ["op 'MatMul' has time -Infinity"]),
        ('{"ops": {"MatMul": 1e999}}', ["op 'MatMul' has time 1e999", "beyond a float"]),
        ('{"ops": {"MatMul": 12345678901234567890}}', ["op 'MatMul'", "20 digits"]),
        ('{"ops": {"MatMul": 1001}, "unit": "s"}', ["op 'MatMul' has time 1001 s", "1000 s"]),
        ('{"ops": {}, "steps": [1, NaN]}', ["'steps' > 1 is NaN"]),
    ],
)
def test_costs_numbers_are_finite_bounded_and_named(text, words, tmp_path):
    path = tmp_path / "costs.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_costs(path)
    assert str(caught.value).startswith(f"{path}: ")
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"launch_us": {"value": 3, "range": [NaN, 4]}}', ["'launch_us'.range[0] is NaN"]),
        ('{"launch_us": Infinity}', ["'launch_us' is Infinity"]),
        ('{"launch_threads": 99999999999999999999}', ["'launch_threads'", "20 digits"]),
        ('{"launch_threads": 9223372036854775808}', ["'launch_threads'", "beyond 64 bits"]),
    ],
)
def test_host_profile_numbers_name_their_field(text, words, tmp_path):
    path = tmp_path / "host.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_host_profile(path)
    for word in words:
        assert word in str(caught.value)


def test_largest_accepted_figures_still_read(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text('{"unit": "ms", "ops": {"a": 1000000, "b": 9223372036854775807e-30}}')
    assert load_costs(path)["a"] == 1e9


# -- rules files -------------------------------------------------------------------------------------------------
SLOW = r"(.*)(.*)(.*)(.*)\4\3\2\1"  # ~12 ms on a node name of towers_tf1: under the 1 s per-match bound


def partition_with(rules, tmp_path, model=TOWERS):
    return msopt_measured("partition", model, "-n", 2, "--rules", rules, "-o", tmp_path / "out")


def test_compile_bomb_is_refused_before_compiling(tmp_path):
    """`(?:(?:(?:(?:a{100}){100}){100}){100})` took over 6 GB in 9 s to compile."""
    path = tmp_path / "compile_bomb.yaml"
    path.write_text("rules:\n  - match: '(?:(?:(?:(?:a{100}){100}){100}){100})'\n    stream: 1\n")
    assert_refused(partition_with(path, tmp_path), f"{path}:2", "invalid regex in 'match'", "unrolls to over")
    assert not (tmp_path / "out").exists()


def test_5000_aliases_of_one_slow_rule_are_compiled_and_matched_once(tmp_path):
    """alias_5000_slow.yaml: 5,000 YAML aliases of one slow rule took over 60 s, one match per rule and node."""
    path = tmp_path / "alias_5000_slow.yaml"
    path.write_text(f"rules:\n  - &r {{match: '{SLOW}', stream: 1}}\n" + "  - *r\n" * 4999)
    result = partition_with(path, tmp_path)
    assert result["code"] == 0, result["stderr"]
    assert result["seconds"] < TIMEOUT_S and result["peak_mib"] < PEAK_MIB


def test_many_distinct_slow_rules_stop_at_the_budget_naming_the_rule(tmp_path):
    path = tmp_path / "distinct_slow.yaml"
    path.write_text("rules:\n" + "".join(f"  - {{match: '{SLOW}|q{i}', stream: 1}}\n" for i in range(300)))
    result = partition_with(path, tmp_path)
    assert_refused(result, "matching the rules file ran over its time budget", "this rule was being tested")
    assert f"at {path}:" in result["stderr"] and "rule " in result["stderr"]
    assert not (tmp_path / "out").exists()


def test_a_slow_function_regex_runs_once_per_function_name_not_per_node(tmp_path):
    """deepfm_tf2: 1,210 nodes in 6 functions; ~50 ms a match, once per node this was over 50 s."""
    path = tmp_path / "function_slow.yaml"
    pattern = r"(?!__inference_signature)(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1"
    path.write_text(f"rules:\n  - function: '{pattern}'\n    stream: 1\n")
    result = partition_with(path, tmp_path, SAMPLES / "deepfm_tf2")
    assert result["code"] == 0, result["stderr"]
    assert result["seconds"] < TIMEOUT_S


def test_a_budget_spent_between_two_nodes_names_the_rule_tested_last(tmp_path):
    from msopt.rules.manual import _first_match, read_rules

    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - op: MatMul\n    stream: 1\n  - scope: a/\n    stream: 1\n")
    spec = read_rules(path)
    node = types.SimpleNamespace(name="b/c", op="Add", function="", key="b/c")
    assert _first_match(spec, node) is None
    spec.patterns.deadline = spec.patterns.started  # spent: the next node stops before its first rule
    with pytest.raises(InputError, match=f"rule 2 at {path}:4: matching the rules file ran over its time budget"):
        _first_match(spec, node)
    fresh = read_rules(path)
    fresh.patterns.deadline = fresh.patterns.started  # spent before any node: the first rule is named
    with pytest.raises(InputError, match=f"rule 1 at {path}:2: "):
        _first_match(fresh, node)


@pytest.mark.parametrize(
    "pattern, size",
    [
        ("a{100}", 100),
        ("(?:a{100}){100}", 10_000),
        ("(?P<n>ab{10}|c){10}", 120),
        ("[a{1000}]", 1),  # a set: its braces are characters
        (r"x\{1000}", 7),  # an escaped brace: literal text
        ("a{}b{,}", 7),  # no count: literal text
        ("(?#a{1000})b", 1),  # a comment
        ("(?x)(?:a{1000}#)\n){1000}", 1_000_001),  # verbose mode: every count multiplies (clamped)
        ("a{" + "9" * 5000 + "}", 1_000_001),  # a count beyond int conversion limits: clamped
    ],
)
def test_unrolled_size_bounds_what_compiling_expands(pattern, size):
    assert unrolled_size(pattern) == size


def test_patterns_refused_by_size_or_depth_and_deduplicated():
    patterns = Patterns()
    assert patterns.compile("a.*b") is patterns.compile("a.*b") and len(patterns.compiled) == 1
    with pytest.raises(PatternError, match=f"at most {MAX_PATTERN_SIZE:,}"):
        patterns.compile("(?:a{1000}){11}")
    with pytest.raises(PatternError, match="nests groups deeper"):
        patterns.compile("(" * (MAX_GROUP_DEPTH + 1) + "a" + ")" * (MAX_GROUP_DEPTH + 1))
    patterns.compile("(" * MAX_GROUP_DEPTH + "a" + ")" * MAX_GROUP_DEPTH)


# -- .npz inputs -----------------------------------------------------------------------------------------------
def npy_header(shape, descr="<f4"):
    """An .npy version 1.0 header for an array of ``shape`` (no data)."""
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def write_zip(path, members):
    """A zip of (name, method, crc, compressed bytes, size) members, written by hand: a member may declare a size
    its data only reaches when decompressed (zipfile would compress the data itself)."""
    out, directory = bytearray(), bytearray()
    for name, method, crc, data, size in members:
        encoded = name.encode()
        fields = struct.pack("<HHHHHIII", 20, 0, method, 0, 0x21, crc, len(data), size)
        directory += (
            b"PK\x01\x02"
            + struct.pack("<H", 20)
            + fields
            + struct.pack("<HHHHHII", len(encoded), 0, 0, 0, 0, 0, len(out))
            + encoded
        )
        out += b"PK\x03\x04" + fields + struct.pack("<HH", len(encoded), 0) + encoded + data
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), len(out), 0)
    path.write_bytes(bytes(out + directory + end))
    return path


def stored(name, data):
    return (name, zipfile.ZIP_STORED, zlib.crc32(data), data, len(data))


def bomb(path, shape):
    """bomb_3gb.npz: X a float32 array of ``shape`` (3 GiB of zeros) deflated to ~3 MB, Y a small array.

    Each MiB of zeros ends in a full flush, so its deflated bytes are the same every time and the file is built
    from one; its CRC is left 0: the reader refuses the member before decompressing any of it, and a reader that
    did decompress it would have taken the 3 GiB before it could check one.
    """
    header, mib = npy_header(shape), 1 << 20
    total = int(np.prod(shape)) * 4
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(header) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(bytes(mib)) + compressor.flush(zlib.Z_FULL_FLUSH)
    data = head + block * (total // mib) + compressor.flush(zlib.Z_FINISH)
    small = npy_header((4, 1)) + bytes(16)
    x = ("X.npy", zipfile.ZIP_DEFLATED, 0, data, len(header) + total)
    return write_zip(path, [x, stored("Y.npy", small)])


def npz_reproducer(name, directory):
    path = directory / name
    if name == "bomb_3gb.npz":
        return bomb(path, (805306368, 1))
    if name == "bomb_3gb_wrongshape.npz":
        return bomb(path, (268435456, 3))
    if name == "fake_huge_shape.npz":  # a header claiming 2^50 rows, and no data
        return write_zip(path, [stored("X.npy", npy_header((1 << 50, 1))), stored("Y.npy", npy_header((4, 1)))])
    path.write_bytes(b"hello")  # five_bytes.npz: a text file
    return path


NPZ_REPRODUCERS = {
    "bomb_3gb.npz": ["input 'X' (X.npy) declares 3,221,225,600 bytes decompressed", "at most 2 GiB"],
    "bomb_3gb_wrongshape.npz": ["input 'X' (X.npy) declares", "at most 2 GiB"],
    "fake_huge_shape.npz": ["input 'X' (X.npy)", "shape [1125899906842624, 1]", "at most 2 GiB"],
    "five_bytes.npz": ["not an .npz (zip) file"],
}
READ_ONE = (
    "import sys\nfrom msopt.errors import InputError\nfrom msopt.files.inputs import read_npz\n"
    "spec = {'dtype': 'float', 'shape': [None, 1]}\n"
    "try:\n    read_npz(sys.argv[1], {'X': spec, 'Y': spec})\n"
    "except InputError as e:\n    sys.exit('msopt: error: ' + str(e))\n"
)


@pytest.mark.parametrize("name", sorted(NPZ_REPRODUCERS))
def test_npz_reproducers_are_refused_before_any_array_is_read(name, tmp_path):
    path = npz_reproducer(name, tmp_path)
    assert_refused(measured(sys.executable, "-c", READ_ONE, path), path, *NPZ_REPRODUCERS[name], code=1)


@pytest.mark.tf
@pytest.mark.parametrize("name", sorted(NPZ_REPRODUCERS))
def test_run_with_npz_reproducers_is_one_line_in_bounded_memory(name, tmp_path):
    path = npz_reproducer(name, tmp_path)
    result = msopt_measured("run", LINREG, "--device", "cpu", "--inputs", path, tf=True)
    assert_refused(result, path, *NPZ_REPRODUCERS[name])


def test_a_zip_directory_over_its_limit_is_refused_before_zipfile_parses_it(tmp_path):
    path = tmp_path / "many.npz"
    name_length = 200
    count = reading.MAX_NPZ_DIRECTORY_BYTES // (46 + name_length) + 100  # 46 bytes an entry, and its name
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(count):
            archive.writestr(f"{i:0{name_length}d}", b"")
    with pytest.raises(InputError, match="its zip directory is"):
        read_npz(path, SPEC)


def test_members_compressed_otherwise_than_savez_does_are_refused(tmp_path):
    path = tmp_path / "bz2.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr("X.npy", npy_header((2, 1)) + bytes(8))
        archive.writestr("Y.npy", npy_header((2, 1)) + bytes(8))
    with pytest.raises(InputError, match="zip method 12"):
        read_npz(path, SPEC)


def test_a_header_promising_more_than_its_member_holds_is_truncated(tmp_path):
    path = write_zip(tmp_path / "short.npz", [stored("X.npy", npy_header((1000, 1))), stored("Y.npy", b"")])
    with pytest.raises(InputError, match=r"input 'X' \(X.npy\) is truncated"):
        read_npz(path, SPEC)


def test_the_total_of_the_arrays_read_is_capped_before_any_is_read(tmp_path, monkeypatch):
    path = tmp_path / "two.npz"
    np.savez(path, X=np.ones((100, 1), np.float32), Y=np.ones((100, 1), np.float32), unused=np.ones(10**6))
    monkeypatch.setattr(inputs, "MAX_NPZ_DATA_BYTES", 700)  # each array alone is 400 bytes
    read = []
    monkeypatch.setattr(inputs, "_data", lambda *args: read.append(args) or np.ones((100, 1), np.float32))
    with pytest.raises(InputError, match="input 'Y' .* takes the arrays read to over"):
        read_npz(path, SPEC)
    assert read == []


def test_arrays_read_in_steps_are_the_arrays_written(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "READ_STEP", 7)  # steps that split elements
    x = np.arange(6, dtype=np.float32).reshape(6, 1)
    f = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2))  # written in Fortran order
    words = np.array(["a", "bc", "déf"])
    path = tmp_path / "good.npz"
    np.savez_compressed(path, X=x, Y=np.zeros((0, 1), np.float32), F=f, words=words)
    spec = {**SPEC, "F": {"dtype": "float", "shape": [3, 2]}, "words": {"dtype": "string", "shape": [3]}}
    batch = read_npz(path, spec)
    assert np.array_equal(batch["X"], x) and batch["Y"].shape == (0, 1) and np.array_equal(batch["F"], f)
    assert batch["words"].tolist() == [b"a", b"bc", "déf".encode()]


def test_a_pickled_member_is_refused_by_its_header(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, X=np.array([[None]], dtype=object), Y=np.ones((1, 1), np.float32))
    with pytest.raises(InputError, match="holds Python objects"):
        read_npz(path, SPEC)
