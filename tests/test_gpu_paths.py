"""The GPU paths without a GPU: device names, memory, the GPU inventory, GPU profiles, XLA clusters, device hiding.

nvidia-smi and the CUDA driver are the stand-ins in tests/bin and tests/stand_ins; TensorFlow is
the real (CPU) one. What only a GPU can show is listed in docs/gpu.md.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES, run_msopt
from google.protobuf import text_format

from msopt.errors import InputError
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.runner import gpu_layout
from msopt.runner.devices import virtual_devices
from msopt.runner.gpu_inventory import driver_gpus, memory_mb, resolve_visible, uuids_for, visible_gpus
from msopt.runner.gpu_layout import GpuLayout, stream_device
from msopt.runner.trace import costs_document, executed_devices, executed_names, has_kernel_rows, row_kind

pytestmark = pytest.mark.tf

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"


# -- device names: TensorFlow's ordering --------------------------------------------------------------
def tensorflow_device_ids(gpus, per_gpu):
    """{(physical GPU, its j-th virtual device): TF device id}, built the way gpu_device.cc's CreateDevices
    does: one spec per virtual device, physical GPU by physical GPU, ids in that order (no device_ordinal)."""
    specs = [(g, j) for g in range(gpus) for j in range(per_gpu)]
    return {spec: tf_id for tf_id, spec in enumerate(specs)}


@pytest.mark.parametrize("gpus", [1, 2, 4])
@pytest.mark.parametrize("streams", [1, 3, 4, 8])
def test_stream_devices_follow_tensorflows_gpu_by_gpu_numbering(gpus, streams):
    layout = GpuLayout(streams, gpus)
    ids = tensorflow_device_ids(gpus, layout.per_gpu)
    names = [layout.device_name(k) for k in range(streams)]
    assert len(set(names)) == streams  # no two streams share a device
    for k, name in enumerate(names):
        gpu, slot = k % gpus, k // gpus  # the documented rule: stream k on GPU k mod G
        assert name == f"/device:GPU:{ids[(gpu, slot)]}"
        assert layout.gpu_of_device(f"/job:localhost/replica:0/task:0{name}") == gpu
    used = {k % gpus for k in range(streams)}
    assert used == set(range(min(gpus, streams)))  # every GPU gets work once there are enough streams


def test_two_gpus_of_two_streams_each_are_the_documented_example():
    # GPU 0's devices are /device:GPU:0..1, GPU 1's /device:GPU:2..3; stream 1 goes to GPU 1.
    assert [stream_device(k, 2, 2) for k in range(4)] == [
        "/device:GPU:0",
        "/device:GPU:2",
        "/device:GPU:1",
        "/device:GPU:3",
    ]
    assert GpuLayout(4, 2).streams_on(1) == [1, 3] and GpuLayout(3, 2).streams_on(1) == [1, None]
    with pytest.raises(ValueError, match="needs 3 virtual devices per GPU"):
        gpu_layout.device_index(4, 2, 2)


def test_the_partitioned_model_is_placed_by_the_layout(tmp_path):
    from msopt import emit

    model = load(SAMPLES / "linreg_tf1")
    plan = {"MatMul": 0, "MatMul_1": 1, "Add": 2}
    out = tmp_path / "placed"
    emit.write(model, plan, out, placement="device", device_type=GpuLayout(3, 2))
    placed = {n.key: n.device for n in GraphView(load(out).graph_def).real_nodes() if n.key in plan}
    # 3 streams on 2 GPUs: 2 devices each; stream 1 is GPU 1's first device, stream 2 GPU 0's second.
    assert placed == {"MatMul": "/device:GPU:0", "MatMul_1": "/device:GPU:2", "Add": "/device:GPU:1"}


# -- memory -----------------------------------------------------------------------------------------
def test_replicas_divide_the_default_memory_share_and_streams_split_it_per_gpu():
    assert virtual_devices([16000], 2) == [[(7200, None), (7200, None)]]
    assert virtual_devices([16000], 2, replicas=4) == [[(1800, None), (1800, None)]]  # 0.9 / 4 / 2 streams
    assert virtual_devices([16000], 1, replicas=2) == [[(7200, None)]]
    assert virtual_devices([16000], 2, memory_fraction=0.5, replicas=4) == [[(4000, None), (4000, None)]]
    two = virtual_devices([16000, 8000], 3, priorities=[-2, -1, 0])
    assert two == [[(7200, -2), (7200, 0)], [(3600, -1), (3600, 0)]]  # GPU 1's second device is padding


def smi_env(monkeypatch, gpus=None, visible=None, order=None):
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", "")  # no CUDA driver library: the inventory falls back to nvidia-smi
    for name, value in (
        ("MSOPT_STANDIN_GPUS", json.dumps(gpus) if gpus else None),
        ("CUDA_VISIBLE_DEVICES", visible),
        ("CUDA_DEVICE_ORDER", order),
    ):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


GPUS = [
    {"name": "Big", "uuid": "GPU-aaaa1111-0000-0000-0000-000000000000", "pci": "00000000:3B:00.0", "memory": 40960},
    {"name": "Small", "uuid": "GPU-bbbb2222-0000-0000-0000-000000000000", "pci": "00000000:5E:00.0", "memory": 16384},
    {
        "name": "Big",
        "uuid": "GPU-cccc3333-0000-0000-0000-000000000000",
        "pci": "00000000:86:00.0",
        "memory": "[N/A]",
        "migs": [
            {"profile": "1g.5gb", "uuid": "MIG-dddd4444-0000-0000-0000-000000000000"},
            {"profile": "3g.20gb", "uuid": "MIG-eeee5555-0000-0000-0000-000000000000"},
        ],
    },
]


def test_visible_devices_by_index_uuid_and_mig(monkeypatch):
    smi_env(monkeypatch, GPUS, order="PCI_BUS_ID")
    assert [g.memory_mb for g in visible_gpus()][:2] == [40960, 16384] and visible_gpus()[0].source == "nvidia-smi"
    for spec, want in [
        ("1", [("GPU-bbbb2222-0000-0000-0000-000000000000", 16384)]),
        (
            "GPU-bbbb2222,GPU-aaaa",
            [("GPU-bbbb2222-0000-0000-0000-000000000000", 16384), ("GPU-aaaa1111-0000-0000-0000-000000000000", 40960)],
        ),  # UUID prefixes, in order
        ("MIG-eeee5555-0000-0000-0000-000000000000", [("MIG-eeee5555-0000-0000-0000-000000000000", 20000)]),
        ("0,7,1", [("GPU-aaaa1111-0000-0000-0000-000000000000", 40960)]),  # CUDA stops at the first invalid entry
        ("GPU-ffff,0", []),
        ("", []),
    ]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
        assert [(g.uuid, g.memory_mb) for g in visible_gpus()] == want, spec
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")  # a MIG-enabled GPU by index: the smallest MIG device
    (mig,) = visible_gpus()
    assert mig.memory_mb == 5000 and "MIG" in mig.note


def test_fastest_first_order_is_trusted_only_over_identical_gpus(monkeypatch):
    smi_env(monkeypatch, GPUS[:2], visible="1")  # CUDA_DEVICE_ORDER unset: CUDA's default, FASTEST_FIRST
    (gpu,) = visible_gpus()
    assert gpu.uuid is None and gpu.memory_mb == 16384 and "FASTEST_FIRST" in gpu.note  # smallest of the two
    with pytest.raises(InputError, match="UUID of GPU index 1 is not known for sure.*CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        uuids_for(["1"])
    same = [dict(GPUS[0]), dict(GPUS[0], uuid="GPU-aaaa9999-0000-0000-0000-000000000000", pci="00000000:5E:00.0")]
    smi_env(monkeypatch, same, visible="1")
    assert uuids_for(["1"]) == ["GPU-aaaa9999-0000-0000-0000-000000000000"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # restored


def test_memory_reported_as_not_available_is_an_input_error_naming_the_gpu(monkeypatch):
    gpus = [dict(GPUS[1]), {"name": "X", "uuid": "GPU-9", "pci": "00000000:99:00.0", "memory": "[N/A]"}]
    smi_env(monkeypatch, gpus, order="PCI_BUS_ID")
    assert memory_mb(1) == [16384]
    with pytest.raises(InputError, match=r"memory of GPU 1 \(X\) is reported as \[N/A\]"):
        memory_mb(2)
    assert (
        resolve_visible("GPU-9", [dict(g, index=k, pci=g["pci"], memory_mb=None, migs=[]) for k, g in enumerate(gpus)])[
            0
        ].memory_mb
        is None
    )


def test_msopt_stream_session_config_reads_the_visible_gpus_not_gpu_0(monkeypatch):
    import msopt.stream

    smi_env(monkeypatch, GPUS[:2], order="PCI_BUS_ID", visible="GPU-bbbb2222")
    one = msopt.stream.session_config(2)
    assert [list(v.memory_limit_mb) for v in one.gpu_options.experimental.virtual_devices] == [[7372.0, 7372.0]]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    two = msopt.stream.session_config(3)  # two GPUs: one VirtualDevices entry each, 2 devices per GPU
    assert [list(v.memory_limit_mb) for v in two.gpu_options.experimental.virtual_devices] == [
        [18432.0, 18432.0],
        [7372.0, 7372.0],
    ]
    assert two.gpu_options.visible_device_list == "0,1"
    fixed = msopt.stream.session_config(4, memory_limit_mb=1000, gpus=4)
    assert [len(v.memory_limit_mb) for v in fixed.gpu_options.experimental.virtual_devices] == [1, 1, 1, 1]


def test_msopt_stream_place_spreads_streams_over_gpus():
    import tensorflow as tf

    import msopt.stream

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 1], name="x")
        ops = []
        for k in range(4):
            with msopt.stream(k):
                ops.append(tf.identity(x * float(k + 1), name=f"s{k}"))
    msopt.stream.place(graph, streams=4, gpus=2)
    assert [op.op.device for op in ops] == ["/device:GPU:0", "/device:GPU:2", "/device:GPU:1", "/device:GPU:3"]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the CUDA driver stand-in")
def test_the_driver_probe_reads_memory_and_uuids_through_ctypes(tmp_path, monkeypatch):
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(lib), str(HERE / "stand_ins" / "libcuda_stand_in.c")], check=True
    )
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    found = driver_gpus()
    assert [(g.memory_mb, g.uuid, g.source) for g in found] == [
        (24576, "GPU-11111111-1111-1111-1111-111111111111", "cuda-driver"),
        (40960, "GPU-22222222-2222-2222-2222-222222222222", "cuda-driver"),
    ]
    assert memory_mb(2) == [24576, 40960]  # the driver answers before nvidia-smi is asked
    # With an MPS daemon serving the pipe directory, the probe must not attach to it as a client.
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    assert len(driver_gpus()) == 2 and not list(pipe.glob("standin-client-*"))
    monkeypatch.setenv("STANDIN_CUDA_FAIL_INIT", "1")
    assert driver_gpus() is None


# -- profiles on a GPU ----------------------------------------------------------------------------------
# A RunMetadata of one traced step on GPU 0, written by hand in the shape TensorFlow's
# tensorflow/core/profiler/convert/xplane_to_step_stats.cc (ConvertGpuXSpaceToStepStats) gives it,
# next to the executor's own device rows: every kernel twice, in '/device:GPU:<ordinal>/stream:<id>'
# and '/device:GPU:<ordinal>/stream:all', its node_name the op's tf_op_fullname 'name:type' (a kernel
# of no op keeps the kernel's name), op_start_rel 0 and op_end_rel its duration; copies in
# '/stream:<id><MemcpyH2D>' and '/memcpy'; the host's cuStreamSynchronize calls in '/sync'.
GPU_STEP = """
step_stats {
  dev_stats { device: "/job:localhost/replica:0/task:0/device:GPU:0"
    node_stats { node_name: "MatMul" all_start_micros: 100 op_start_rel_micros: 1 op_end_rel_micros: 6 }
    node_stats { node_name: "Add" all_start_micros: 110 op_start_rel_micros: 1 op_end_rel_micros: 4 }
    node_stats { node_name: "weight_x/read" all_start_micros: 90 op_start_rel_micros: 0 op_end_rel_micros: 2 } }
  dev_stats { device: "/job:localhost/replica:0/task:0/device:GPU:1"
    node_stats { node_name: "MatMul_1" all_start_micros: 100 op_start_rel_micros: 0 op_end_rel_micros: 5 } }
  dev_stats { device: "/job:localhost/replica:0/task:0/device:CPU:0"
    node_stats { node_name: "z" all_start_micros: 300 op_start_rel_micros: 0 op_end_rel_micros: 30 } }
  dev_stats { device: "/device:GPU:0/sync"
    node_stats { node_name: "cuStreamSynchronize" all_start_micros: 120 op_end_rel_micros: 400
                 all_end_rel_micros: 400 timeline_label: "ThreadId 7" } }
  dev_stats { device: "/device:GPU:0/stream:7"
    node_stats { node_name: "MatMul:MatMul" all_start_micros: 130 op_end_rel_micros: 50 all_end_rel_micros: 50
                 timeline_label: "volta_sgemm_32x32_sliced1x4_nn grid:1,1,1 block:128,1,1" }
    node_stats { node_name: "MatMul:MatMul" all_start_micros: 181 op_end_rel_micros: 20 all_end_rel_micros: 20
                 timeline_label: "splitKreduce_kernel" }
    node_stats { node_name: "Add:AddV2" all_start_micros: 210 op_end_rel_micros: 8 all_end_rel_micros: 8 } }
  dev_stats { device: "/device:GPU:0/stream:all"
    node_stats { node_name: "MatMul:MatMul" all_start_micros: 130 op_end_rel_micros: 50 all_end_rel_micros: 50 }
    node_stats { node_name: "MatMul:MatMul" all_start_micros: 181 op_end_rel_micros: 20 all_end_rel_micros: 20 }
    node_stats { node_name: "Add:AddV2" all_start_micros: 210 op_end_rel_micros: 8 all_end_rel_micros: 8 }
    node_stats { node_name: "MatMul_1:MatMul" all_start_micros: 140 op_end_rel_micros: 44 all_end_rel_micros: 44 }
    node_stats { node_name: "void cub::DeviceReduceKernel<float>(float*)" op_end_rel_micros: 3 } }
  dev_stats { device: "/device:GPU:0/stream:8"
    node_stats { node_name: "MatMul_1:MatMul" all_start_micros: 140 op_end_rel_micros: 44 all_end_rel_micros: 44 } }
  dev_stats { device: "/device:GPU:0/stream:9<MemcpyH2D>"
    node_stats { node_name: "X:Placeholder" all_start_micros: 95 op_end_rel_micros: 12 all_end_rel_micros: 12 } }
  dev_stats { device: "/device:GPU:0/memcpy"
    node_stats { node_name: "X:Placeholder" all_start_micros: 95 op_end_rel_micros: 12 all_end_rel_micros: 12 } }
  dev_stats { device: "/device:GPU:0/stream:"
    node_stats { node_name: "unknown event" op_end_rel_micros: 9 } }
}
"""


def test_gpu_profile_sums_kernels_from_stream_all_and_keeps_launches_as_host_time():
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    step = text_format.Parse(GPU_STEP, RunMetadata())
    names = executed_names(GraphView(load(SAMPLES / "linreg_tf1").graph_def))
    costs, unmapped = costs_document([step, step], names)
    assert costs["ops"] == {
        "MatMul": 70.0,  # two kernels, counted once each (not again from /stream:7), not the 5 us launch
        "Add": 8.0,
        "MatMul_1": 44.0,  # ran on the second virtual device of GPU 0: same physical GPU's tracer rows
        "weight_x/read": 2.0,  # a GPU op that launched no kernel: its executor row
        "z": 30.0,  # a CPU op: its executor row is its compute time
    }
    assert costs["host_ops"] == {"MatMul": 5.0, "Add": 3.0, "MatMul_1": 5.0, "weight_x/read": 2.0}
    assert costs["steps"] == 2 and unmapped == 1  # the cub kernel of no op
    assert executed_devices(step, names)["MatMul_1"] == "/device:GPU:1"  # tracer rows never give the placement
    assert has_kernel_rows([step]) and not has_kernel_rows([RunMetadata()])  # no CUPTI: no kernel rows
    assert [row_kind(d.device) for d in step.step_stats.dev_stats] == [
        "device",
        "device",
        "device",
        "skip",
        "skip",
        "kernels",
        "skip",
        "skip",
        "skip",
        "skip",
    ]


# -- XLA clusters stay on one stream ----------------------------------------------------------------------
def jit_scope_graph_def(colocated=False):
    """x -> a -> b in one jit scope -> c (an Identity; colocated with x, and read by d, if ``colocated``)."""
    import contextlib

    import tensorflow as tf
    from tensorflow.python.compiler.xla import jit

    from msopt.graph import protos

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        with jit.experimental_jit_scope():
            a = tf.nn.relu(x, name="a")
            b = tf.math.square(a, name="b")
        with tf.compat.v1.colocate_with(x) if colocated else contextlib.nullcontext():
            c = tf.identity(b, name="c")
        if colocated:
            tf.math.negative(c, name="d")
    return protos.GraphDef.FromString(graph.as_graph_def().SerializeToString())


def test_a_jit_scope_cluster_shares_one_stream():
    from msopt.planning import constraints

    view = GraphView(jit_scope_graph_def())
    assert view.nodes["a"].proto.attr["_XlaCompile"].b
    plan, merges = constraints.apply(view, {"a": 0, "b": 1, "c": 1}, 2)
    assert plan["a"] == plan["b"] and any("xla" in m["constraint"] for m in merges)
    assert "XLA cluster" in next(m["reason"] for m in merges if "xla" in m["constraint"])


def test_clusters_and_colocations_are_the_same_where_the_view_notes_their_attributes():
    """With a library the view notes _XlaCompile, _xla_compile_id and _class while it reads each node's calls, and
    the linkers read only the nodes noted: the nodes and groups are those of a view reading every node."""
    from msopt.graph import protos
    from msopt.graph.view import NOTED_ATTRS
    from msopt.planning import constraints

    plain = jit_scope_graph_def(colocated=True)
    with_library = protos.GraphDef.FromString(plain.SerializeToString())
    with_library.library.function.add().signature.name = "unused"  # a library: the view reads every attribute
    views = [GraphView(plain), GraphView(with_library)]
    assert views[0].string_typed is None and views[1].string_typed is not None
    for name in NOTED_ATTRS:
        found = [[n.key for n in view.with_attr(list(view.real_nodes()), name)] for view in views]
        assert found[0] == found[1] == [n.key for n in views[0].real_nodes() if name in n.proto.attr]
    assert [n.key for n in views[1].with_attr(list(views[1].real_nodes()), "_XlaCompile", "_class")] == ["a", "b", "c"]
    partition = {"a": 0, "b": 1, "c": 1, "d": 0}
    plans = [constraints.apply(view, partition, 2) for view in views]
    assert plans[0] == plans[1] and {m["constraint"] for m in plans[0][1]} >= {"xla", "colocation"}


def test_an_auto_clustered_compile_and_its_run_share_one_stream(hand_view):
    from msopt.planning import constraints

    # The shape XLA's build_xla_ops_pass gives a cluster: _XlaCompile -> _XlaRun (key) -> _XlaMerge.
    graph = hand_view(
        [
            ("x", "Placeholder", []),
            ("compile", "_XlaCompile", ["x"]),
            ("run", "_XlaRun", ["x", "compile"]),
            ("merge", "_XlaMerge", ["run", "x"]),
            ("y", "Relu", ["merge"]),
            ("z", "Relu", ["x"]),
        ]
    )
    plan, merges = constraints.apply(graph, {"compile": 0, "run": 1, "merge": 1, "y": 1, "z": 0}, 2)
    assert plan["compile"] == plan["run"] == plan["merge"] and plan["z"] == 0
    assert [m["constraint"] for m in merges] == ["xla"]


def test_a_jit_compile_function_call_keeps_its_body_on_the_callers_stream():
    import tensorflow as tf

    from msopt.graph import protos
    from msopt.planning import constraints

    @tf.function(jit_compile=True)
    def inner(v):
        return tf.nn.relu(v) * 2.0 + 1.0

    @tf.function
    def outer(v):
        return inner(v) - 1.0

    graph_def = outer.get_concrete_function(tf.TensorSpec([None, 4], tf.float32)).graph.as_graph_def()
    view = GraphView(protos.GraphDef.FromString(graph_def.SerializeToString()))
    call = next(n for n in view.real_nodes() if n.calls and n.function == "")
    body = [n.key for n in view.real_nodes() if n.function == call.calls[0]]
    assert body
    partition = {call.key: 1, **{key: k % 2 for k, key in enumerate(body)}}
    plan, merges = constraints.apply(view, partition, 2)
    assert {plan[k] for k in body if k in plan} | {plan[call.key]} == {plan[call.key]}
    assert any("xla" in m["constraint"] for m in merges)


# -- TensorFlow errors and device hiding ---------------------------------------------------------------
def test_a_tensorflow_error_creating_a_session_is_an_input_error_with_its_cause():
    import tensorflow as tf

    from msopt.runner.devices import tensorflow_errors
    from msopt.runner.executable import Executable

    config = tf.compat.v1.ConfigProto(device_count={"CPU": 0})
    with pytest.raises(InputError, match="TensorFlow cannot create a Session: No CPU devices are available"):
        with tensorflow_errors("create a Session"):
            Executable(load(SAMPLES / "linreg_tf1"), 1, "cpu", session_config=config)


def test_cpu_sessions_for_verify_count_no_gpu():
    from msopt.runner.executable import Executable

    executable = Executable(load(SAMPLES / "linreg_tf1"), 2, "cpu")
    try:
        assert "GPU" in executable.session._config.device_count and executable.session._config.device_count["GPU"] == 0
        assert executable.session._config.device_count["CPU"] == 2
    finally:
        executable.close()


def test_cpu_device_hides_the_gpus_before_the_context_starts():
    code = (
        "import os, tensorflow as tf\n"
        "from msopt.runner.devices import configure_devices\n"
        "kind, config = configure_devices(tf, 2, 'cpu')\n"
        "print(kind, config.device_count['GPU'], len(tf.config.get_visible_devices('GPU')),\n"
        "      len(tf.config.list_logical_devices('CPU')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cpu", "0", "0", "2"]


def test_bitwise_compare_on_a_gpu_turns_tf32_off_and_determinism_on():
    code = (
        "import tensorflow as tf\n"
        "from tensorflow.python.framework import config\n"
        "from msopt.runner.devices import bitwise_gpu_numerics\n"
        "doc = bitwise_gpu_numerics(tf)\n"
        "print(tf.config.experimental.tensor_float_32_execution_enabled(),\n"
        "      config.is_op_determinism_enabled(), doc['tensor_float_32'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "False"]


def test_out_of_range_priority_is_exit_2_naming_the_value():
    done = run_msopt("run", SAMPLES / "linreg_tf1", "--stream-priority", "-1,3", "--streams", 2)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "priority 3 is outside CUDA's range [-5, 0]" in done.stderr


def test_replica_workers_get_allow_growth_their_share_and_no_autotune_before_tensorflow(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    env = {
        "PYTHONPATH": f"{BIN / 'replica_probe'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "MSOPT_PROBE_DIR": str(probe),
    }
    done = run_msopt(
        "run",
        SAMPLES / "linreg_tf1",
        "--device",
        "cpu",
        "--replicas",
        2,
        "--allow-growth",
        "--iterations",
        5,
        "--warmup",
        1,
        "--json",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    seen = [json.loads(p.read_text()) for p in sorted(probe.glob("replica-*.json"))]
    assert len(seen) == 2
    for worker in seen:
        assert worker["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # in the environment TensorFlow starts with
        argv = worker["argv"]
        assert argv[argv.index("--worker-replicas") + 1] == "2"  # each takes 0.9 / 2 of every GPU
