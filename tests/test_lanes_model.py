"""msopt partition --lanes: the K-lane SavedModel loaded by stock TensorFlow with the session config written beside it."""

import json
import subprocess
import sys

import pytest
from conftest import SAMPLES, run_msopt

pytestmark = pytest.mark.tf

# Stock TensorFlow, as a server would: a v1 Session built from the platform config's session_config,
# the model loaded by the SavedModel loader, called from C threads, then K calls traced one by one.
CLIENT = r"""
import json, re, sys, threading
import numpy as np
import tensorflow as tf
from google.protobuf import text_format

lanes_model, original, platform, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
text = open(platform).read()
body = re.search(r"session_config \{\n(.*?)\n\s*\}\n\s*\}\n\s*\}", text, re.S).group(1)
config = text_format.Parse(body, tf.compat.v1.ConfigProto())
v1 = tf.compat.v1

def session(path):
    graph = tf.Graph()
    sess = v1.Session(graph=graph, config=config)
    with graph.as_default():
        meta = v1.saved_model.loader.load(sess, ["serve"], path)
    return sess, meta.signature_def["serving_default"]

sess, sig = session(lanes_model)
ref_sess, ref_sig = session(original)
rng = np.random.default_rng(0)
records = []
for r in range(3):
    feed = {}
    for key, info in sorted(sig.inputs.items()):
        dtype = tf.as_dtype(info.dtype).as_numpy_dtype
        shape = [5 if d.size < 0 else d.size for d in info.tensor_shape.dim]
        feed[key] = rng.integers(-50, 5000, size=shape) if dtype == np.int64 else rng.random(shape).astype(dtype)
    records.append(feed)

def run(s, signature, feed, **kw):
    fetch = {k: v.name for k, v in signature.outputs.items()}
    return s.run(fetch, {signature.inputs[k].name: v for k, v in feed.items()}, **kw)

expected = [run(ref_sess, ref_sig, f) for f in records]
results, lock = [], threading.Lock()

def client(t):
    for i in range(6):
        r = (t + i) % len(records)
        out = run(sess, sig, records[r])
        with lock:
            results.append((r, out))

workers = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
[w.start() for w in workers]
[w.join() for w in workers]
same = all(
    set(out) == set(expected[r]) and all(out[k].tobytes() == expected[r][k].tobytes() for k in out)
    for r, out in results
)
lanes = {}
for call in range(int(sys.argv[5])):  # K consecutive calls: the counter sends one to each lane
    md = v1.RunMetadata()
    run(sess, sig, records[0], options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE), run_metadata=md)
    used = set()
    for d in md.step_stats.dev_stats:
        ops = [ns.timeline_label.split(" = ")[1].split("(")[0] for ns in d.node_stats if " = " in ns.timeline_label]
        if any(op not in ("Const", "Identity", "NoOp", "_Recv", "_Send") for op in ops):
            used.add(d.device.split("device:")[-1])
    lanes[call] = sorted(used)
print(json.dumps({"responses": len(results), "identical": same, "devices_per_call": lanes}))
"""


@pytest.mark.parametrize("sample", ["deepfm_tf2", "towers_tf2"])
def test_lanes_model_spreads_calls_over_every_lane_with_identical_outputs(tmp_path, sample):
    out = tmp_path / f"{sample}_lanes3"
    done = run_msopt("partition", SAMPLES / sample, "--lanes", 3, "--device-type", "cpu", "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["devices"] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    assert doc["signatures"] == ["serving_default", "serving_lane_0", "serving_lane_1", "serving_lane_2"]
    platform = tmp_path / f"{out.name}.platform_config.pbtxt"
    assert "SavedModelBundleSourceAdapterConfig" in platform.read_text()
    assert "Neither server was run" in (tmp_path / f"{out.name}.triton.txt").read_text()
    client = subprocess.run(
        [sys.executable, "-c", CLIENT, str(out), str(SAMPLES / sample), str(platform), "4", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert client.returncode == 0, client.stderr[-3000:]
    result = json.loads(client.stdout.strip().splitlines()[-1])
    assert result["responses"] == 24 and result["identical"]
    calls = result["devices_per_call"]
    lane_devices = [set(d) - {"CPU:0"} or {"CPU:0"} for d in calls.values()]
    assert sorted(next(iter(d)) for d in lane_devices) == ["CPU:0", "CPU:1", "CPU:2"], calls


def test_gpu_lanes_model_gets_virtual_gpus_in_its_session_config(tmp_path):
    from msopt.lanes.model import session_config_text

    text = session_config_text(4, "gpu", 2000)
    assert text.count("memory_limit_mb: 2000") == 4 and "virtual_devices" in text


@pytest.mark.parametrize(
    "sample, says", [("linreg_frozen.pb", "needs one as input"), ("towers_tf1", "VariableV2 'ConvNet/")]
)
def test_lanes_of_a_frozen_graph_or_reference_variables_are_refused(tmp_path, sample, says):
    done = run_msopt("partition", SAMPLES / sample, "--lanes", 2, "-o", tmp_path / "x")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("msopt: error: ") and len(done.stderr.strip().splitlines()) == 1
    assert says in done.stderr
    assert list(tmp_path.iterdir()) == []
