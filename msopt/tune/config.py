"""TuneConfig: the options of one ``msopt tune``, as typed fields, checked before any work starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from msopt.errors import InputError

# What one tune may take on, checked before anything loads (each bounds memory or time that --budget cannot):
MAX_PLANS = 128  # plans made for the candidate set: auto and each policy at 2..--streams, one stream, the rules files
MAX_CANDIDATES = 32  # candidates measured (--max-candidates): each stays loaded in TensorFlow on every device
MAX_LANE_MODELS = 136  # lane candidates 1..K load 1 + 2 + ... + K lanes (K = 16), a model each with copied weights
MAX_RECORDS = 64  # generated input batches (--records), all held in memory with each candidate's outputs
# Steps and requests run in all (verifying, warming up, measuring); --budget stops the measuring rounds but not
# the others, so with it they alone count. A million steps of a 1 ms model are 17 minutes.
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class TuneConfig:
    """What ``msopt tune`` does (names as the command's parameters)."""

    model: str
    streams: int
    output: str
    batch_size: int = 8
    budget: float | None = None  # seconds for the whole tune; None: no cap
    rounds: int = 5  # measuring rounds (each runs every candidate ``steps`` times, interleaved)
    steps: int = 20  # measured steps per candidate per round
    warmup: int = 5  # unmeasured steps per candidate before the first round
    records: int = 2  # distinct input batches, the same for every candidate and the original
    seed: int = 0
    max_candidates: int = (
        10  # measured candidates at most (one stream, the model's own plan and --rules files always are)
    )
    rules: tuple[str, ...] = ()  # rules files planned as extra candidates (policy manual)
    target: str | None = None  # GPU profile of the simulated figures
    device: str = "auto"  # auto: a GPU when TensorFlow sees one, else logical CPU devices
    signature: str | None = None
    costs_output: str | None = None  # default: <output>.costs.json
    report: str | None = None  # default: <output>.tune.json
    force: bool = False
    tags: str | None = None
    lanes: int | None = None  # lane counts 1..lanes measured for the chosen plan (None: no lane candidates)
    concurrency: int = 1  # client threads driving the lane candidates

    def check(self):
        """InputError for options that cannot work, before anything loads."""
        if not 1 <= self.streams <= 1024:
            raise InputError(f"--streams must be in [1, 1024], got {self.streams}")
        if self.budget is not None and self.budget <= 0:
            raise InputError(f"--budget must be a positive number of seconds, got {self.budget:g}")
        for name in ("batch_size", "rounds", "steps", "records", "max_candidates"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.lanes is not None and not 1 <= self.lanes <= 256:
            raise InputError(f"--lanes must be in [1, 256], got {self.lanes}")
        if not 1 <= self.concurrency <= 1024:
            raise InputError(f"--concurrency must be in [1, 1024], got {self.concurrency}")
        if self.devices > 1024:
            raise InputError(
                f"--lanes {self.lane_count} x --streams {self.streams} = {self.devices} devices: at most 1024 devices "
                "(lanes x streams) can be configured"
            )
        if self.warmup < 0:
            raise InputError(f"--warmup must be at least 0, got {self.warmup}")
        if self.max_candidates < 1 + len(self.rules):
            raise InputError(
                f"--max-candidates {self.max_candidates} leaves no room for one stream and {len(self.rules)} rules file(s)"
            )
        self.check_work()

    def check_work(self):
        """InputError when the candidate set or the steps to run are beyond what one tune can finish (see MAX_*)."""
        from msopt.rules.auto import RULE_CANDIDATES
        from msopt.simulator.kernels import MAX_BATCH_SIZE

        if self.batch_size > MAX_BATCH_SIZE:
            raise InputError(f"--batch-size must be at most {MAX_BATCH_SIZE}, got {self.batch_size}")
        if self.records > MAX_RECORDS:
            raise InputError(f"--records must be at most {MAX_RECORDS}, got {self.records}")
        if self.max_candidates > MAX_CANDIDATES:
            raise InputError(f"--max-candidates must be at most {MAX_CANDIDATES}, got {self.max_candidates}")
        per_count = 1 + len(RULE_CANDIDATES)  # auto and each policy, at each stream count
        plans = 2 + len(self.rules) + (self.streams - 1) * per_count  # one stream, the model's own plan
        if plans > MAX_PLANS:
            most = 1 + (MAX_PLANS - 2 - len(self.rules)) // per_count
            raise InputError(
                f"--streams {self.streams} plans {plans} candidates ({per_count} at each stream count from 2): at most "
                f"{MAX_PLANS}; use --streams {most} or fewer"
            )
        k = self.lane_count or 0
        if k * (k + 1) // 2 > MAX_LANE_MODELS:
            most = max(n for n in range(1, k) if n * (n + 1) // 2 <= MAX_LANE_MODELS)
            raise InputError(
                f"--lanes {k} loads the model {k * (k + 1) // 2} times (1 + 2 + ... + {k} lanes, one lane count "
                f"after another): at most {MAX_LANE_MODELS}; use --lanes {most} or fewer"
            )
        plan_steps, lane_steps = self.steps_to_run(min(plans, self.max_candidates))
        if plan_steps + lane_steps > MAX_STEPS:
            what = "verifying, warming up" + ("" if self.budget is not None else ", measuring")
            if lane_steps > plan_steps:
                lower = "--lanes, --concurrency or --steps" + (" or --rounds" if self.budget is None else "")
            else:
                lower = "--warmup, --records or --max-candidates" + (
                    ", --rounds or --steps" if self.budget is None else ""
                )
            raise InputError(
                f"this tune would run {plan_steps + lane_steps:,} steps and requests ({what}): at most {MAX_STEPS:,}; "
                f"lower {lower}" + ("" if self.budget is not None else "; or give a --budget")
            )

    def steps_to_run(self, candidates):
        """(steps of the plans, requests of the lane candidates) this tune runs at most with ``candidates``
        candidates measured; with --budget, those of the measuring rounds do not count (the budget stops them)."""
        measuring = self.budget is None
        plan_steps = candidates * (self.records + max(self.warmup, 1) + (self.rounds * self.steps if measuring else 0))
        c, lane_steps = self.concurrency, 0
        for k in range(1, (self.lane_count or 0) + 1):  # as msopt.lanes.tune: verify, a warm-up round, the rounds
            lane_steps += max(k * self.records, 2 * c) + self.steps * c * (1 + (self.rounds if measuring else 0))
        return plan_steps, lane_steps

    def with_absolute_paths(self):
        """The same tune with every path made absolute (the runner works in a directory of its own)."""
        given = {k: getattr(self, k) for k in ("model", "output", "costs_output", "report")}
        paths = {k: os.path.abspath(v) for k, v in given.items() if v is not None}
        return replace(self, **paths, rules=tuple(os.path.abspath(r) for r in self.rules))

    @property
    def costs_path(self):
        return self.costs_output or f"{str(self.output).rstrip('/')}.costs.json"

    @property
    def lane_count(self):
        """Lanes measured at most: --lanes, else one with --concurrency above 1, else None (no lane candidates)."""
        return self.lanes if self.lanes is not None else (1 if self.concurrency > 1 else None)

    @property
    def devices(self):
        """Devices every candidate is loaded on: enough for the widest plan on the most lanes."""
        return self.streams * (self.lane_count or 1)

    @property
    def host_profile_path(self):
        return f"{str(self.output).rstrip('/')}.host_profile.json"

    @property
    def report_path(self):
        return self.report or f"{str(self.output).rstrip('/')}.tune.json"
