"""Shared test fixtures: the sample models, the CLI (in a subprocess or in-process) and cached Keras models."""

import ast
import fcntl
import importlib.util
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
CACHE = Path(os.environ.get("MSOPT_TEST_CACHE", ROOT / ".cache" / "test-models"))
TF_GUARD = Path(__file__).resolve().parent / "tf_guard"
TF_GUARD_VARIABLE = "MSOPT_TEST_FORBID_TF"

# Tests press Ctrl-C (send SIGINT) to the msopt processes they start. A shell that runs the suite as a
# background job starts it with SIGINT ignored, and an ignored signal stays ignored in every process
# started below (Python then installs no KeyboardInterrupt handler): give this process the default
# handler, which its children get back as the default disposition.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def tf_deselected(config):
    """Whether the run's -m expression leaves out every test marked `tf`, whatever its other markers (-m "not tf")."""
    expression = config.getoption("markexpr", "") or ""
    if not expression:
        return False
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    others = sorted(set(re.findall(r"[A-Za-z_][\w.]*", expression)) - {"and", "or", "not", "tf"})
    for values in itertools.product((False, True), repeat=len(others)):
        marked = {"tf", *(name for name, value in zip(others, values) if value)}
        if compiled.evaluate(lambda name, **kwargs: name in marked):  # noqa: B023 (evaluated at once)
            return False
    return True


def marked_tf(path):
    """Whether a test module says `pytestmark = pytest.mark.tf` (or a list holding it) at its top level."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in statement.targets
        ):
            return any(
                isinstance(n, ast.Attribute) and n.attr == "tf" and isinstance(n.value, ast.Attribute)
                for n in ast.walk(statement.value)
            )
    return False


def pytest_configure(config):
    """In a run without `tf` tests, `import tensorflow` raises, here and in every Python process a test starts.

    So a test that needs TensorFlow but lacks the marker fails, naming itself, instead of slowing the quick suite.
    """
    if not tf_deselected(config):
        return
    spec = importlib.util.spec_from_file_location("tf_guard", TF_GUARD / "sitecustomize.py")
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    os.environ[TF_GUARD_VARIABLE] = "collection"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TF_GUARD), os.environ.get("PYTHONPATH")]))
    guard.install()
    # pytest.importorskip("tensorflow") would turn the refusal into a skip: make it an error instead.
    config.addinivalue_line("filterwarnings", "error:(?s).*in a run without the .tf. marker")


def pytest_ignore_collect(collection_path, config):
    """Modules marked `tf` as a whole are not even imported when `tf` is deselected (they may import TensorFlow)."""
    if TF_GUARD_VARIABLE in os.environ and collection_path.suffix == ".py" and marked_tf(collection_path):
        return True
    return None


def pytest_collectstart(collector):
    if TF_GUARD_VARIABLE in os.environ:
        os.environ[TF_GUARD_VARIABLE] = collector.nodeid or "collection"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if TF_GUARD_VARIABLE in os.environ:
        os.environ[TF_GUARD_VARIABLE] = item.nodeid
    return (yield)


def run_msopt(*args, cwd=None, env=None, timeout=600):
    """Run the real command line in a fresh process (own TensorFlow state); returns CompletedProcess."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "msopt", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
    )


@pytest.fixture
def msopt():
    return run_msopt


@pytest.fixture
def sample(tmp_path):
    """A private copy of a sample model (so no test can alter the committed ones)."""

    def copy(name):
        src = SAMPLES / name
        dst = tmp_path / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
        return dst

    return copy


@pytest.fixture(scope="session")
def sample_view():
    """``open(name)``: (model, view) of a sample model (a name under sample_models/, or a path), loaded read only."""
    from msopt.graph.view import GraphView
    from msopt.load import load

    def open_(name):
        model = load(name if isinstance(name, Path) else SAMPLES / name)
        return model, GraphView(model.graph_def)

    return open_


@pytest.fixture
def sample_cost(sample_view):
    """``build(name, **options)``: (model, view, cost model) of a sample model; options go to CostModel (target=...)."""
    from msopt.simulator.cost import CostModel

    def build(name, **options):
        model, view = sample_view(name)
        return model, view, CostModel(view, model, **options)

    return build


def built_once(target, build):
    """``target`` (a cached model directory), built by ``build()`` unless already there.

    A file lock makes concurrent test processes (pytest -n) wait for one build instead of racing."""
    if (target / "saved_model.pb").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "saved_model.pb").exists():
            build()
    return target


def keras_application(name, **kwargs):
    """A keras.applications model (weights=None) saved as a TF2 SavedModel with tf-keras, cached on disk.

    tf-keras saves one function per layer (thousands for NASNetMobile): the many-function case.
    """
    target = CACHE / name
    code = (
        "import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL']='2'\n"
        "import tensorflow as tf, tf_keras as keras\n"
        f"m = getattr(keras.applications, {name!r})(weights=None, **{kwargs!r})\n"
        "tmp = sys.argv[1] + '.partial'\n"
        "tf.saved_model.save(m, tmp)\n"
        "os.replace(tmp, sys.argv[1])\n"
    )

    def build():
        shutil.rmtree(str(target) + ".partial", ignore_errors=True)
        subprocess.run([sys.executable, "-c", code, str(target)], check=True, capture_output=True, timeout=900)

    return built_once(target, build)


@pytest.fixture(scope="session")
def nasnet_mobile():
    return keras_application("NASNetMobile")


@pytest.fixture(scope="session")
def mobilenet_v2():
    return keras_application("MobileNetV2", input_shape=(96, 96, 3))


# A BERT-style encoder with the structure of tf-models-official's BertEncoder/BertClassifier (small
# config): word embeddings (a gather), position embeddings, type embeddings as one_hot @ table,
# LayerNormalization(1e-12); per layer a MultiHeadAttention with a padding mask, residual Add,
# LayerNormalization, EinsumDense + approximate GELU, EinsumDense, Add, LayerNormalization; a tanh
# pooler on the first token and a 2-class head. The type table has 16 rows so that generated ids index it.
TRANSFORMER_CODE = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf, tf_keras as keras
layers_, hidden, heads, inner, seq, vocab = (int(v) for v in sys.argv[2:8])
keras.utils.set_random_seed(0)
L = keras.layers
gelu = lambda x: keras.activations.gelu(x, approximate=True)
ids = keras.Input((seq,), dtype="int32", name="input_word_ids")
mask = keras.Input((seq,), dtype="int32", name="input_mask")
types = keras.Input((seq,), dtype="int32", name="input_type_ids")
x = L.Embedding(vocab, hidden, name="word_embeddings")(ids)
type_table = L.Dense(hidden, use_bias=False, name="type_embeddings")
x = x + type_table(tf.one_hot(types, 16))
x = x + L.Embedding(seq, hidden, name="position_embedding")(tf.range(seq))[tf.newaxis]
x = L.LayerNormalization(epsilon=1e-12, name="embeddings/layer_norm")(x)
attention_mask = tf.cast(mask[:, tf.newaxis, :], tf.float32) * tf.ones((1, seq, 1))
for i in range(layers_):
    name = f"transformer/layer_{i}"
    attn = L.MultiHeadAttention(heads, hidden // heads, name=f"{name}/self_attention")(x, x, attention_mask=attention_mask)
    x = L.LayerNormalization(epsilon=1e-12, name=f"{name}/self_attention_layer_norm")(x + attn)
    h = L.EinsumDense("abc,cd->abd", (None, inner), bias_axes="d", name=f"{name}/intermediate")(x)
    h = L.Activation(gelu, name=f"{name}/gelu")(h)
    h = L.EinsumDense("abc,cd->abd", (None, hidden), bias_axes="d", name=f"{name}/output")(h)
    x = L.LayerNormalization(epsilon=1e-12, name=f"{name}/output_layer_norm")(x + h)
pooled = L.Dense(hidden, activation="tanh", name="pooler_transform")(x[:, 0, :])
logits = L.Dense(2, name="classifier")(pooled)
model = keras.Model({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}, logits)
tmp = sys.argv[1] + ".partial"
tf.saved_model.save(model, tmp)
os.replace(tmp, sys.argv[1])
"""


def transformer_encoder(layers=4, hidden=256, heads=4, inner=1024, seq=16, vocab=100):
    """A BERT-style transformer encoder classifier built with tf-keras, saved as a TF2 SavedModel, cached on disk.

    tf-models-official's BertClassifier would pin another TensorFlow (2.20) and pull in ~80 packages,
    so the same structure is built here from tf-keras layers.
    """
    target = CACHE / f"transformer_encoder_{layers}x{hidden}_h{heads}_i{inner}_s{seq}_v{vocab}"
    args = [str(v) for v in (layers, hidden, heads, inner, seq, vocab)]

    def build():
        shutil.rmtree(str(target) + ".partial", ignore_errors=True)
        subprocess.run(
            [sys.executable, "-c", TRANSFORMER_CODE, str(target), *args], check=True, capture_output=True, timeout=900
        )

    return built_once(target, build)


@pytest.fixture(scope="session")
def transformer():
    return transformer_encoder()


# -- hand-built graphs ----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def hand_graph():
    """``build(spec)``: a GraphDef from spec [(name, op, [input refs])], refs as in a NodeDef ('a', 'a:1', '^a')."""
    from msopt.graph import protos

    def build(spec):
        graph = protos.GraphDef()
        for name, op, inputs in spec:
            graph.node.add(name=name, op=op).input.extend(inputs)
        return graph

    return build


@pytest.fixture(scope="session")
def hand_view(hand_graph):
    """``build(spec)``: the graph view of a hand-built graph (spec as for ``hand_graph``)."""
    from msopt.graph.view import GraphView

    return lambda spec: GraphView(hand_graph(spec))


@pytest.fixture(scope="session")
def diamond(hand_view):
    """a -> b, a -> c, b -> d, c -> d: two chains, two edges that must cross streams (a fresh view per call)."""
    return lambda: hand_view(
        [("a", "Relu", []), ("b", "Relu", ["a"]), ("c", "Relu", ["a"]), ("d", "AddV2", ["b", "c"])]
    )


@pytest.fixture(scope="session")
def fork_join(hand_view):
    """``build(kernel_us, width=2, target="v100")``: (view, cost model, keys) of x -> b0..b(width-1) -> join, the
    branches MatMuls of ``kernel_us`` each, the join an AddN of 5 us; keys are the branches' and the join's."""
    from msopt.simulator.cost import CostModel

    def build(kernel_us, width=2, target="v100"):
        keys = [f"b{i}" for i in range(width)]
        v = hand_view([("x", "Placeholder", [])] + [(k, "MatMul", ["x", "x"]) for k in keys] + [("join", "AddN", keys)])
        times = dict.fromkeys(keys, kernel_us)
        times["join"] = 5.0
        return v, CostModel(v, None, target=target, costs=times), keys + ["join"]

    return build
