"""The published multi-stream figures, each with its source, what it measures, and how it maps onto a simulation."""

from dataclasses import dataclass

IOS = "IOS (Ding et al., MLSys 2021), V100"
NVIDIA = "NVIDIA's TensorFlow multi-stream PRs (tensorflow/tensorflow 60322, 61632, 68497)"
STREAMREC = "StreamRec (DASFAA 2023), TF-XLA recommendation inference"
NIMBLE = "Nimble (Kwon et al., NeurIPS 2020), V100"


@dataclass(frozen=True)
class Figure:
    """A published ratio of one-stream time to multi-stream time (or multi- to one-stream throughput)."""

    key: str
    source: str
    published: str  # the figure as published
    ratio: float | None  # None: not mapped (see ``note``)
    model: str | None  # a name of calibration.models.BUILDERS
    target: str = "v100"
    batch_size: int = 1
    level: str = "query"  # "query": one query's latency; "request": several queries in flight (throughput)
    merge_copy_streams: bool = False
    quick: bool = False  # part of --quick
    concurrency: int = 8  # request-level: queries in flight (assumption: the sources do not say)
    lanes: int = 4  # request-level: stream groups, one compute stream each (assumption)
    note: str = ""


FIGURES = [
    Figure(
        "ios-inception-b1",
        IOS,
        "Inception-v3, batch 1: 6.51 ms sequential, 4.03 ms IOS",
        6.51 / 4.03,
        "InceptionV3",
        quick=True,
        note="its sequential latency is the one figure a cost-model constant (GEMM_OUTPUTS_PER_THREAD) is fitted to",
    ),
    Figure(
        "ios-nasnet-b1",
        IOS,
        "NASNet, batch 1: 22.95 ms sequential, 16.04 ms IOS",
        22.95 / 16.04,
        "NASNetLarge",
        note="IOS does not say which NASNet; NASNetLarge (331x331) is the one mapped",
    ),
    Figure(
        "ios-nasnet-b1-mobile",
        IOS,
        "NASNet, batch 1: 22.95 ms sequential, 16.04 ms IOS",
        22.95 / 16.04,
        "NASNetMobile",
        note="the other keras NASNet, for reference",
    ),
    Figure(
        "ios-inception-b16",
        IOS,
        "Inception-v3, batch 16: 17.82 ms TensorRT, 15.17 ms IOS",
        17.82 / 15.17,
        "InceptionV3",
        batch_size=16,
        note="proxy: TensorRT (one stream, fused) stands for the sequential schedule; IOS's own sequential figure "
        "at this batch is not used",
    ),
    Figure(
        "ios-inception-b128",
        IOS,
        "Inception-v3, batch 128: 106.84 ms TensorRT, 102.74 ms IOS",
        106.84 / 102.74,
        "InceptionV3",
        batch_size=128,
        note="proxy, as at batch 16",
    ),
    Figure(
        "ios-squeezenet-b1",
        IOS,
        "SqueezeNet, batch 1 (sequential vs IOS)",
        None,
        None,
        note="not mapped: the published SqueezeNet latencies were not found in the material searched, and "
        "keras.applications builds no SqueezeNet",
    ),
    Figure(
        "nimble",
        NIMBLE,
        "multi-stream vs single-stream, per model",
        None,
        None,
        note="not mapped: no per-model multi-stream vs single-stream figure was found in the material searched "
        "(only the end-to-end speedups over PyTorch, which mix in ahead-of-time scheduling)",
    ),
    Figure(
        "nvidia-stream-groups",
        NVIDIA,
        "rec-model inference 1524 -> 2229 samples/s with stream groups",
        2229 / 1524,
        "DeepFM-Criteo",
        target="a100",
        batch_size=256,
        level="request",
        quick=True,
        note="request-level: simulated as 8 queries in flight over 1-4 lanes (stream groups) against one lane; GPU, batch, concurrency, group count and model size assumed",
    ),
    Figure(
        "nvidia-merged-copies",
        NVIDIA,
        "1524 -> 2471 samples/s with stream groups and copy streams merged",
        2471 / 1524,
        "DeepFM-Criteo",
        target="a100",
        batch_size=256,
        level="request",
        merge_copy_streams=True,
        note="request-level, as above, with merge_copy_streams; the gain of merging comes from host-device copies of inputs and outputs, which the concurrency simulation does not model",
    ),
    Figure(
        "streamrec-latency",
        STREAMREC,
        "latency -27.8% with multiple streams",
        1 / (1 - 0.278),
        "DeepFM-Criteo",
        target="a100",
        batch_size=256,
        quick=True,
        note="mapped as one query's latency (the load it was measured under is not known here); GPU, batch and "
        "model size assumed",
    ),
    Figure(
        "streamrec-throughput",
        STREAMREC,
        "throughput +52% with multiple streams",
        1.52,
        "DeepFM-Criteo",
        target="a100",
        batch_size=256,
        level="request",
        note="request-level, as NVIDIA's",
    ),
]
