"""The command-line options the commands share, each declared once (help text, type, default)."""

import math
from typing import Any, Callable, Optional

import click
from click.decorators import FC

from msopt.rules import policy_help


class FiniteFloat(click.FloatRange):
    """click.FloatRange that refuses NaN and the infinities too: every float option's type. FloatRange alone lets
    "nan" through (every comparison with NaN is false), and "inf" wherever the range has no upper end."""

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        number = click.types.FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


MODEL = click.argument("model", type=click.Path(path_type=str))
TAGS = click.option("--tags", default=None, help="SavedModel tag set to use, comma-separated (default: serve).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout and nothing else.")
TARGET = click.option(
    "--target",
    default=None,
    metavar="GPU",
    help="GPU profile of the simulated figures: h100, a100, v100 or t4 (default: h100).",
)
BATCH_SIZE = click.option(
    "--batch-size",
    type=int,
    default=1,
    show_default=True,
    help="Size of the unknown batch dimension of the inputs, for the cost model.",
)
COSTS = click.option(
    "--costs",
    type=click.Path(dir_okay=False),
    default=None,
    help='Measured per-op times, JSON {"unit": "us", "ops": {"<node key>": time}}; they replace the model\'s.',
)
HOST_PROFILE = click.option(
    "--host-profile",
    type=click.Path(dir_okay=False),
    default=None,
    help='Measured host constants, JSON, e.g. {"op_overhead_us": 4, "launch_us": 2.5, "launch_contention": '
    '{"value": 0.2, "range": [0.1, 0.3]}}; they replace the host model\'s (see docs/reference.md).',
)
MERGE_COPY_STREAMS = click.option(
    "--merge-copy-streams",
    is_flag=True,
    help="Simulate copies on the compute streams, as TensorFlow's stream_merge_options (msopt run "
    "--merge-copy-streams) runs them, instead of on a device-to-device copy stream.",
)
SIGNATURE = click.option(
    "--signature", default=None, help="Signature to plan for (default: serving_default, else the first)."
)
BOUNDARY = click.option(
    "--boundary",
    multiple=True,
    metavar="TENSOR",
    help="--policy stage: the stage is everything upstream of these tensors (repeatable; default: found).",
)
OVERRIDE = click.option("--override", is_flag=True, help="Rules win over _stream_id attributes already on the nodes.")
# Steps one run may take (each keeps its latency; a larger count is a typo or a run that never ends), and the
# records generated and held in memory at once; tune checks its own total (msopt.tune.config).
MAX_RUN_STEPS = 10_000_000
MAX_RUN_RECORDS = 4096
SEED = click.option(
    "--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Seed of the generated inputs."
)
FORCE = click.option(
    "--force",
    is_flag=True,
    help="Replace existing outputs, where msopt wrote them (see docs/guide.md: never an input, a folder holding one, "
    "or a file of another kind).",
)
TIMELINE = click.option(
    "--timeline",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the simulated schedule as Chrome trace-event JSON (open it in Perfetto or chrome://tracing).",
)


def streams(default: Optional[int] = 4, help: str = "Number of streams.") -> Callable[[FC], FC]:
    return click.option(
        "--streams", "-n", type=click.IntRange(1, 1024), default=default, show_default=default is not None, help=help
    )


def concurrency(
    help: str = "Requests kept in flight: a closed loop issues the next one when one completes.",
    default: Optional[int] = None,
) -> Callable[[FC], FC]:
    return click.option(
        "--concurrency",
        "-c",
        type=click.IntRange(1, 1024),
        default=default,
        show_default=default is not None,
        help=help,
    )


def lanes(
    help: str = "Request-level lanes: request i runs on lane i mod K, each lane a virtual GPU.",
) -> Callable[[FC], FC]:
    return click.option("--lanes", type=click.IntRange(1, 256), default=None, help=help)


def policy(
    help: str = "Partition rule (see `msopt partition --help`). Default: auto when available, else none.",
) -> Callable[[FC], FC]:
    return click.option("--policy", default=None, help=help)


def rules(must_exist: bool = False) -> Callable[[FC], FC]:
    return click.option(
        "--rules",
        type=click.Path(exists=must_exist, dir_okay=False),
        default=None,
        help="YAML rules file for --policy manual (implies it).",
    )


def policies_block() -> str:
    """The `Policies:` block of a help text, generated from the policy registry."""
    return "\b\nPolicies:\n" + policy_help()
