"""Which GPU each stream runs on, and the TensorFlow device name that puts it there.

The rule: with G visible GPUs, stream k runs on GPU k mod G, as the (k // G)-th of that GPU's
virtual devices. Every GPU gets N = ceil(streams / G) virtual devices (the last ones unused when
G does not divide the stream count), so each GPU's memory is split the same way.

Why round-robin: every GPU gets as many streams as the others (give or take one), a stream's GPU
does not depend on the stream count, and the first G streams use all G GPUs. Data-parallel towers
across GPUs would need the model copied per GPU, which a partition does not do. Its cost: streams
that exchange tensors may sit on different GPUs and pay for the copies (not priced by the cost model).

TensorFlow numbers virtual devices physical GPU by physical GPU (``gpu_device.cc``,
``BaseGPUDeviceFactory::CreateDevices``: one spec per virtual device, GPU 0's first, ordered by
that index unless ``device_ordinal`` is set, which msopt never sets): GPU 0's N devices are
/device:GPU:0..N-1, GPU 1's are /device:GPU:N..2N-1, and so on.
"""

import math


def per_gpu(streams, gpus):
    """Virtual devices each GPU gets for ``streams`` streams on ``gpus`` GPUs."""
    return max(1, math.ceil(streams / max(1, gpus)))


def gpu_of(stream, gpus):
    """The physical GPU (its index among the visible ones) stream ``stream`` runs on."""
    return stream % max(1, gpus)


def device_index(stream, gpus, count):
    """TensorFlow's GPU device index of ``stream`` with ``gpus`` GPUs of ``count`` virtual devices each."""
    gpus = max(1, gpus)
    slot = stream // gpus
    if slot >= count:
        raise ValueError(f"stream {stream} needs {slot + 1} virtual devices per GPU, only {count} exist")
    return gpu_of(stream, gpus) * count + slot


def stream_device(stream, gpus, count):
    """'/device:GPU:i' for ``stream`` (see ``device_index``)."""
    return f"/device:GPU:{device_index(stream, gpus, count)}"


def physical_gpu_of_device(index, count):
    """The physical GPU a TensorFlow GPU device index belongs to (``count`` virtual devices per GPU)."""
    return index // max(1, count)


class GpuLayout:
    """``streams`` streams spread over ``gpus`` GPUs; usable wherever a device type names stream devices."""

    def __init__(self, streams, gpus, uuids=None):
        self.streams = streams
        self.gpus = max(1, gpus)
        self.per_gpu = per_gpu(streams, self.gpus)
        self.uuids = list(uuids or [])

    def device_name(self, stream):
        return stream_device(stream, self.gpus, self.per_gpu)

    def streams_on(self, gpu):
        """The streams of GPU ``gpu``, in the order of its virtual devices (None for an unused one)."""
        slots = [gpu + j * self.gpus for j in range(self.per_gpu)]
        return [s if s < self.streams else None for s in slots]

    def gpu_of_device(self, device):
        """The physical GPU of a device name ('/device:GPU:3' or a full name), None for other devices."""
        tail = device.rsplit("/device:", 1)[-1]
        kind, _, index = tail.partition(":")
        if kind.upper() != "GPU" or not index.isdigit():
            return None
        return physical_gpu_of_device(int(index), self.per_gpu)

    def describe(self):
        """For the run report: the rule, and each stream's device and physical GPU."""
        rows = []
        for k in range(self.streams):
            gpu = gpu_of(k, self.gpus)
            row = {"stream": k, "device": self.device_name(k), "gpu": gpu}
            if gpu < len(self.uuids) and self.uuids[gpu]:
                row["gpu_uuid"] = self.uuids[gpu]
            rows.append(row)
        return {
            "rule": "stream k on GPU k mod G",
            "gpus": self.gpus,
            "virtual_devices_per_gpu": self.per_gpu,
            "streams": rows,
        }
