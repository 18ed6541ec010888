"""RunConfig: everything one ``msopt run`` does, as typed fields; replica workers receive it as a JSON file."""

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Optional

from msopt.errors import InputError

PATH_FIELDS = ("inputs_npz", "save_outputs", "compare_to", "trace_path", "profile_path")
# Only the parent acts on these: a worker runs one replica, inherits CUDA_VISIBLE_DEVICES (by UUID under
# MPS) and the MPS environment, and is told its place in the run on its command line.
PARENT_ONLY = {
    "mps": False,
    "mps_threads": None,
    "replicas": 1,
    "gpus": None,
    "launcher": "local",
    "hosts": None,
    "compare_layouts": False,
}
WORKER_FIELDS = ("worker_barrier", "worker_replicas")


@dataclass(frozen=True)
class RunConfig:
    """The options of ``msopt run`` (names as the command's parameters)."""

    model: str
    signature: Optional[str] = None
    streams: Optional[int] = None
    device: str = "auto"
    batch_size: int = 8
    inputs_npz: Optional[str] = None
    records: int = 1
    seed: int = 0
    iterations: int = 100
    warmup: int = 10
    save_outputs: Optional[str] = None
    compare_to: Optional[str] = None
    trace_path: Optional[str] = None
    profile_path: Optional[str] = None
    trace_steps: int = 3
    gpus: Optional[str] = None
    gpu_memory_fraction: Optional[float] = None
    allow_growth: bool = False
    stream_priority: Optional[str] = None
    mps: bool = False
    mps_threads: Optional[int] = None
    replicas: int = 1
    stage: bool = False
    stage_boundary: Optional[str] = None
    stage_threads: int = 1
    stage_capacity: int = 1
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    merge_copy_streams: bool = False  # GPU: copies on the compute stream (GPUOptions stream_merge_options)
    tags: Optional[str] = None
    concurrency: int = 1  # client threads keeping requests in flight
    lanes: Optional[int] = None  # request-level lanes, each on its own device(s); None: no lanes
    lane_weights: Optional[str] = None  # "shared" or "copy"; None: shared where TensorFlow allows
    launcher: str = "local"  # how replicas start: "local" (msopt's own workers) or "mpirun"
    hosts: Optional[str] = None  # --launcher mpirun: host:slots,... for mpirun -H
    compare_layouts: bool = False  # --replicas R against --lanes K at the same load, one report
    worker_barrier: Optional[str] = None  # set in a replica worker: the directory its start barrier lives in
    worker_replicas: int = 1  # in a replica worker: the processes sharing each GPU
    force: bool = False  # replace existing outputs (--save-outputs, --trace, --profile) that msopt wrote

    @property
    def uses_lanes(self):
        """True when requests run over lanes from client threads (--lanes, or --concurrency above 1)."""
        return self.lanes is not None or self.concurrency > 1

    @property
    def one_process_only(self):
        """The options that need this process's results (refused with --replicas/--mps), as (flag, value)."""
        return (
            ("--trace", self.trace_path),
            ("--profile", self.profile_path),
            ("--save-outputs", self.save_outputs),
            ("--compare-to", self.compare_to),
            ("--stage", self.stage),
        )

    def with_absolute_paths(self):
        """The same run with the paths the user gave made absolute (the runner works in a directory of its own)."""
        return dataclasses.replace(
            self, **{k: os.path.abspath(getattr(self, k)) for k in PATH_FIELDS if getattr(self, k)}
        )

    def for_worker(self):
        """What each replica worker runs: this run minus what only the parent does."""
        return dataclasses.replace(
            self.with_absolute_paths(), **PARENT_ONLY, worker_barrier=None, worker_replicas=self.replicas
        )  # the model as given: workers share our cwd

    def to_json(self):
        """The run's settings as JSON (the worker's place in the run, WORKER_FIELDS, travels on its command line)."""
        fields = dataclasses.asdict(self)
        return json.dumps({k: v for k, v in fields.items() if k not in WORKER_FIELDS}, indent=1)

    @classmethod
    def from_json(cls, text, **worker):
        """A RunConfig from ``to_json``'s text (data only: unknown keys or a non-object are refused)."""
        try:
            fields = json.loads(text)
        except ValueError as e:
            raise InputError(f"worker configuration: not JSON: {e}") from None
        known = {f.name for f in dataclasses.fields(cls)} - set(WORKER_FIELDS)
        if not isinstance(fields, dict) or "model" not in fields or set(fields) - known:
            raise InputError(
                f"worker configuration: expected an object with the fields of RunConfig, "
                f"given {sorted(fields) if isinstance(fields, dict) else type(fields).__name__}"
            )
        return cls(**fields, **worker)

    @classmethod
    def read(cls, path, **worker):
        """A worker's RunConfig from the JSON file its parent wrote."""
        from msopt.files.reading import MAX_CONFIG_BYTES, read_text

        return cls.from_json(read_text(path, "worker configuration", MAX_CONFIG_BYTES), **worker)
