"""The property every mutated model (tests/mutations.py) must keep on the command line, and a runner.

Each variant runs in-process through a proto-only command (inspect, partition without --verify,
simulate, visualize to .dot); the property: exit 0 or 2, exactly one ``msopt: error:`` line when
2, the input unchanged, nothing partial or stray written, an answer within TIME_LIMIT_S.
"""

import hashlib
import os
import random
import re
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

from click.testing import CliRunner
from mutations import SEEDS, Seed, make_variant

from msopt.cli import main

POLICIES = ["none", "auto", "chains", "towers", "stage", "embedding", "collective"]
TIME_LIMIT_S = 30  # one command on one variant; the samples take well under a second
RULES = [
    "rules:\n  - op: MatMul\n    stream: 1\n",
    "default: 0\nrules:\n  - match: '.*'\n    stream: 1\n",
    "rules:\n  - scope: tower_1/\n    stream: 1\n  - function: '.*'\n    stream: 0\n",
    "rules: [",
    "rules:\n  - match: '('\n    stream: 1\n",
]


HOSTILE_SIDE_FILES = [  # --costs / --host-profile contents a hostile or unlucky user may pass
    '{"unit": "us", "ops": {"x": 1e308}}',
    '{"unit": ["us"], "ops": {}}',
    '{"unit": {"a": 1}, "ops": {}}',
    '{"unit": "us", "ops": {"x": NaN}}',
    '{"launch_us": ' + "9" * 5000 + "}",
    '{"launch_us": Infinity}',
    '{"launch_contention": {"value": 0.2, "range": [0.3, 0.1]}}',
    "[" * 100_000,
    "",
]


# -- the surfaces around the model: the paths a command writes and the side files it reads ----------
def hostile_path(rng, model, where):
    """A path an output option may be pointed at: the model, inside it, its folder or above, a FIFO, spelled
    through ``..`` or a symlink, or an empty string; else an ordinary new file beside the model."""
    kind = rng.choice(["model", "inside", "folder", "above", "fifo", "dots", "link", "empty", "plain"])
    if kind == "model":
        return model
    if kind == "inside":
        return model / "saved_model.pb" if model.is_dir() else model / "x.json"
    if kind == "folder":
        return where
    if kind == "above":
        return where.parent
    if kind == "fifo":
        fifo = where / "fifo"
        if not fifo.exists():
            os.mkfifo(fifo)
        return fifo
    if kind == "dots":
        return f"{where}/../{where.name}/{model.name}"
    if kind == "link":
        link = where / "link"
        if not link.exists():
            link.symlink_to(where, target_is_directory=True)
        return link / model.name
    if kind == "empty":
        return ""
    return where / "report.json"


def hostile_side_file(rng, where):
    """A --costs or --host-profile file: hostile JSON, a symlink to /dev/zero, or a FIFO."""
    kind = rng.randrange(len(HOSTILE_SIDE_FILES) + 2)
    path = where / f"side{kind}.json"
    if path.exists() or path.is_symlink():
        return path
    if kind == len(HOSTILE_SIDE_FILES):
        path.symlink_to("/dev/zero")
    elif kind == len(HOSTILE_SIDE_FILES) + 1:
        os.mkfifo(path)
    else:
        path.write_text(HOSTILE_SIDE_FILES[kind])
    return path


def with_surfaces(rng, args, model, where):
    """``args`` with, now and then, an output option pointed somewhere hostile (with or without --force) and a
    hostile side file: the model and everything beside it must stay as they were."""
    command = args[0]
    if command != "inspect" and rng.randrange(3) == 0:
        options = {"partition": ["-o", "--report"], "simulate": ["--timeline"], "visualize": ["-o", "--timeline"]}
        option = rng.choice(options[command])
        target = hostile_path(rng, model, where)
        if option == "-o" and "-o" in args:
            args = list(args)
            args[args.index("-o") + 1] = target
        else:
            args = [*args, option, target]
        if rng.randrange(2):
            args.append("--force")
    if command in ("partition", "simulate") and rng.randrange(6) == 0:
        args = [*args, rng.choice(["--costs", "--host-profile"]), hostile_side_file(rng, where)]
    return args


# -- the property ----------------------------------------------------------------------------------
def command_for(rng, model, where):
    command = rng.choice(["inspect", "partition", "partition", "simulate", "visualize"])
    if command == "inspect":
        return ["inspect", model] + (["--json"] if rng.randrange(2) else [])
    streams = str(rng.randint(1, 4))
    if command == "partition":
        options = ["--placement", "device"] if rng.randrange(2) else []
        if rng.randrange(6) == 0:
            rules = where / "rules.yaml"
            rules.write_text(rng.choice(RULES))
            options += ["--rules", rules, "--override"]
        else:
            options += ["--policy", rng.choice(POLICIES)]
        if rng.randrange(4) == 0:
            options += ["--no-const-dup", "--batch-size", str(rng.choice([1, 64, 2**40]))]
        return ["partition", model, "--streams", streams, "-o", where / "out", *options]
    if command == "simulate":
        return [
            "simulate",
            model,
            "--streams",
            streams,
            "--policy",
            rng.choice(POLICIES),
            "--target",
            rng.choice(["h100", "t4", "v100"]),
            "--batch-size",
            str(rng.choice([1, 7, 2**31 - 1])),
        ]
    return [
        "visualize",
        model,
        "-o",
        where / "out.dot",
        "--streams",
        streams,
        "--policy",
        rng.choice(POLICIES),
        "--depth",
        str(rng.choice([1, 2, 64])),
    ] + (["--expand", rng.choice(["model", "tower_1", "a/b"])] if rng.randrange(4) == 0 else [])


def digest(path):
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


class _Timeout(BaseException):  # not an Exception: msopt's own handler must not turn it into an exit code
    pass


def _alarm(signum, frame):
    raise _Timeout()


def check(args, model, where):
    """Run one command; returns (exit code, problem or None)."""
    before = digest(model)
    entries = {p.name for p in where.iterdir()}
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        result = CliRunner().invoke(main, [str(a) for a in args], prog_name="msopt")
    except _Timeout:
        return "hang", f"no answer within {TIME_LIMIT_S} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    code = result.exit_code
    if isinstance(result.exception, _Timeout):
        return "hang", f"no answer within {TIME_LIMIT_S} s"
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    if code not in (0, 2):
        detail = errors[-1] if errors else repr(result.exception)
        return code, f"exit {code}: {detail}"
    if code == 2 and (len(errors) != 1 or not errors[0].startswith("msopt: error: ")):
        return code, f"exit 2 with {len(errors)} stderr lines: {errors[:3]}"
    if digest(model) != before:
        return code, "the input changed"
    if not where.is_dir() or entries - {p.name for p in where.iterdir()}:
        return code, "an entry beside the input was deleted"
    after = {p.name for p in where.iterdir()} - entries
    expected = {"out", "out.dot", "report.json"} & after if code == 0 else set()
    if after != expected:
        return code, f"stray or partial output: {sorted(after - expected)}"
    if code == 0 and args[0] == "partition":
        out = Path(args[args.index("-o") + 1])  # where/out, or where a hostile path pointed it
        if not (out / "saved_model.pb").is_file() and not out.is_file():
            return code, "partition succeeded without a complete output"
    if code == 2:
        check.last_error = errors[0]
    return code, None


def error_kind(line):
    """An error line without its file, node and values: what kind of refusal it is."""
    text = re.sub(r"'[^']*'|\[[^\]]*\]|\d+|\S+: (?=)", "_", line.replace("msopt: error: ", "", 1))
    text = re.sub(r"^\S*(sample_models|v\d+)\S*", "", text).strip()
    return " ".join(text.split()[:7])


def run(count, seed, workdir, progress=None, surfaces=False):
    """Run ``count`` variants (``surfaces``: with hostile output paths and side files too); returns (Counter of exit codes, [(index, description, args, problem)], seconds,
    Counter of refusal kinds)."""
    rng = random.Random(seed)
    seeds = [Seed(name) for name, _ in SEEDS]
    codes, problems, kinds = Counter(), [], Counter()
    run.slowest = (0.0, [])  # (seconds, command line) of the slowest variant
    started = time.perf_counter()
    for i in range(count):
        where = Path(workdir) / f"v{i}"
        where.mkdir()
        sample, data, description = make_variant(rng, seeds)
        model = sample.write(data, where)
        args = command_for(rng, model, where)
        if surfaces:
            args = with_surfaces(rng, args, model, where)
        check.last_error = None
        one = time.perf_counter()
        code, problem = check(args, model, where)
        run.slowest = max(run.slowest, (time.perf_counter() - one, [str(a) for a in args]))
        codes[code] += 1
        if check.last_error:
            kinds[error_kind(check.last_error)] += 1
        if problem:
            problems.append((i, f"{sample.name}: {description}", [str(a) for a in args], problem))
        shutil.rmtree(where, ignore_errors=True)
        if progress:
            progress(i + 1, codes)
    return codes, problems, time.perf_counter() - started, kinds
