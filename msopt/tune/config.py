"""TuneConfig: the options of one ``msopt tune``, as typed fields, checked before any work starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from msopt.errors import InputError


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
