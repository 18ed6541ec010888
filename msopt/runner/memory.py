"""Memory a run used: this process's peak resident set and, on a GPU, TensorFlow's allocator peaks."""


def process_memory(tf=None, device_type="cpu", devices=()):
    """This process's peak resident memory and, on a GPU, TensorFlow's allocator peak on each of ``devices``."""
    memory = {"peak_rss_mb": _status_mb("VmHWM")}
    if tf is not None and device_type == "gpu":
        peaks = {}
        for device in devices:
            try:
                peaks[device] = round(tf.config.experimental.get_memory_info(device)["peak"] / 2**20, 1)
            except (ValueError, RuntimeError):
                continue
        memory["gpu_peak_mb"] = peaks
    return memory


def _status_mb(field):
    """A field of /proc/self/status in MB (Linux; None elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None
