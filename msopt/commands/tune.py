"""The ``msopt tune`` command: parses its options into a TuneConfig, tunes (msopt.tune), prints the report."""

import sys

import click

from msopt.commands import options as opt
from msopt.commands.echo import print_json, progress
from msopt.commands.options import JSON, MODEL, TAGS, TARGET
from msopt.errors import CheckFailed


def _bar(length):
    """A progress bar on stderr, only when a person watches."""
    if not sys.stderr.isatty():
        return None
    return click.progressbar(length=length, label="msopt: measuring", file=sys.stderr)


@click.command("tune")
@MODEL
@click.option("--streams", "-n", type=click.IntRange(1, 1024), required=True, help="Most streams a candidate may use.")
@click.option("-o", "--output", required=True, help="Where to write the chosen model.")
@click.option(
    "--batch-size", "-b", type=click.IntRange(1), default=8, show_default=True, help="Batch size of the inputs."
)
@click.option(
    "--budget",
    type=opt.FiniteFloat(0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Cap on the whole tune; the rounds stop at a round boundary and the choice is made from what was measured.",
)
@click.option("--rounds", type=click.IntRange(1), default=5, show_default=True, help="Interleaved measuring rounds.")
@click.option("--steps", type=click.IntRange(1), default=20, show_default=True, help="Steps per candidate per round.")
@click.option(
    "--warmup", type=click.IntRange(0), default=5, show_default=True, help="Unmeasured steps per candidate first."
)
@click.option(
    "--records", type=click.IntRange(1), default=2, show_default=True, help="Distinct generated input batches."
)
@opt.SEED
@click.option(
    "--max-candidates",
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="Candidates measured at most; beyond it the plans simulated slowest are left out (and reported).",
)
@click.option(
    "--rules",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A rules file (as partition --rules) to measure as a candidate too; repeatable.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "gpu", "cpu"]),
    default="auto",
    show_default=True,
    help="auto: the GPU when TensorFlow sees one, else logical CPU devices.",
)
@opt.lanes("Also measure the chosen plan on 1..K lanes (as run --lanes) under --concurrency client threads.")
@opt.concurrency(
    "Client threads driving the lane candidates; above 1 the figure is throughput, else latency.", default=1
)
@click.option("--signature", default=None, help="Signature to tune (default: serving_default, or the only one).")
@click.option("--costs-output", default=None, help="Where to write the measured costs (default: OUTPUT.costs.json).")
@click.option("--report", default=None, help="Where to write the JSON report (default: OUTPUT.tune.json).")
@click.option("--force", is_flag=True, help="Replace existing outputs.")
@TARGET
@TAGS
@JSON
def tune(
    model,
    streams,
    output,
    batch_size,
    budget,
    rounds,
    steps,
    warmup,
    records,
    seed,
    max_candidates,
    rules,
    device,
    lanes,
    concurrency,
    signature,
    costs_output,
    report,
    force,
    target,
    tags,
    as_json,
):
    """Measure candidate plans of MODEL on this machine and write the fastest one whose outputs are bitwise equal.

    Profiles the one-stream model (real traced steps), plans candidates from the measured costs
    (one stream; auto's best plan at 2..N streams; each policy that applies at 2..N streams;
    --rules files), loads each placed on the present device (virtual GPUs, or logical CPU
    devices), checks each bitwise against the original on the same records (a candidate that
    differs is discarded), measures them in interleaved rounds (A B C A B C ...) and keeps the
    fastest median. A multi-stream plan must beat one stream by more than the measured spread.

    With --lanes K, the chosen plan is then measured on 1..K lanes under --concurrency C client
    threads (every response checked bitwise), keeping the best throughput (C > 1) or latency.

    Writes the chosen model (devices set), its costs file (for partition --costs), a host profile
    fitted to the measured plans (OUTPUT.host_profile.json, for simulate/partition --host-profile)
    and a report (simulated vs measured time per candidate). Exit 1 when no candidate verifies; Ctrl-C keeps the
    best candidate of the complete rounds. Figures measured on the CPU do not predict a GPU.

    \b
    Example:
      msopt tune sample_models/towers_tf1 --streams 2 --budget 120 -o /tmp/towers_tuned
      msopt run /tmp/towers_tuned --compare-to sample_models/towers_tf1
      msopt tune sample_models/deepfm_tf2 -n 2 --lanes 2 --concurrency 4 -o /tmp/deepfm_tuned
    """
    from msopt.tune.config import TuneConfig
    from msopt.tune.report import text
    from msopt.tune.run import tune as run_tune

    config = TuneConfig(
        model=model,
        streams=streams,
        output=output,
        batch_size=batch_size,
        budget=budget,
        rounds=rounds,
        steps=steps,
        warmup=warmup,
        records=records,
        seed=seed,
        max_candidates=max_candidates,
        rules=tuple(rules),
        target=target,
        device=device,
        lanes=lanes,
        concurrency=concurrency,
        signature=signature,
        costs_output=costs_output,
        report=report,
        force=force,
        tags=tags,
    )
    try:
        document = run_tune(config, progress, _bar)
    except CheckFailed as failed:
        if getattr(failed, "document", None) is not None:
            print_json(failed.document) if as_json else click.echo(text(failed.document))
        raise
    print_json(document) if as_json else click.echo(text(document))
    if document["rounds"]["stopped"] == "interrupted":
        raise KeyboardInterrupt  # after writing the best verified candidate: exit 130
