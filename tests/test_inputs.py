"""Generated inputs real graphs accept (ids, predicates, strings) and TensorFlow errors kept to one line with their cause."""

import numpy as np
import pytest
from conftest import run_msopt

from msopt.errors import InputError
from msopt.files.inputs import InputGenerator
from msopt.graph import protos
from msopt.graph.protos import DTYPE_NAMES
from msopt.graph.view import GraphView
from msopt.runner.tensorflow_runtime import error_line

pytestmark = pytest.mark.tf

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1


def generator_for(graph, placeholders):
    """The generator msopt builds from ``graph``'s protos for these placeholders (key -> tensor)."""
    view = GraphView(protos.GraphDef.FromString(graph.as_graph_def().SerializeToString()))
    specs = {
        key: {
            "name": t.name,
            "dtype": DTYPE_NAMES[t.dtype.as_datatype_enum],
            "shape": None if t.shape.rank is None else t.shape.as_list(),
        }
        for key, t in placeholders.items()
    }
    return InputGenerator(specs, view)


def run_generated(graph, placeholders, fetches, batch_size=64, seeds=range(3)):
    """Run ``fetches`` on generated batches: TensorFlow accepts them or the test fails with TF's error."""
    generate = generator_for(graph, placeholders)
    with v1.Session(graph=graph) as session:
        session.run(v1.global_variables_initializer())
        for seed in seeds:
            feeds = generate(batch_size, seed)
            session.run(fetches, {placeholders[k]: v for k, v in feeds.items()})
    return generate


def test_ids_stay_below_the_rows_of_the_tables_they_index():
    graph = tf.Graph()
    with graph.as_default():
        ids = v1.placeholder(tf.int64, [None], name="ids")  # through casts and reshapes to a 2-row table
        depth = v1.placeholder(tf.int32, [None], name="depth")  # one_hot depth 3
        hashed = v1.placeholder(tf.int64, [None], name="hashed")  # FloorMod 5 before a 100-row table
        shared = v1.placeholder(tf.int32, [None, 2], name="shared")  # two tables: 7 and 3 rows
        small = v1.get_variable("small", [2, 4])
        x = tf.gather(small, tf.squeeze(tf.expand_dims(tf.reshape(tf.cast(ids, tf.int32), [-1]), 1), 1))
        y = tf.one_hot(depth, 3)
        z = tf.gather(v1.get_variable("big", [100, 4]), tf.math.floormod(hashed, 5))
        w = tf.nn.embedding_lookup(v1.get_variable("seven", [7, 4]), shared) + tf.gather(tf.ones([3, 4]), shared)
        fetches = [x, y, z, w]
    generate = run_generated(graph, {"ids": ids, "depth": depth, "hashed": hashed, "shared": shared}, fetches)
    assert {k: n.bound for k, n in generate.needs.items()} == {"ids": 2, "depth": 3, "hashed": 5, "shared": 3}


def test_ids_are_followed_into_function_bodies_to_the_variables_shape(tmp_path):
    class Model(tf.Module):
        def __init__(self):
            self.table = tf.Variable(np.ones((3, 2), np.float32))

        @tf.function
        def embed(self, ids):
            return tf.nn.embedding_lookup(self.table, tf.cast(ids, tf.int32))

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.int64, name="ids")])
        def __call__(self, ids):
            return {"out": self.embed(tf.reshape(ids, [-1]))}

    model = Model()
    tf.saved_model.save(model, str(tmp_path / "m"), signatures=model.__call__)
    from msopt.graph.contents import signatures
    from msopt.load import load

    loaded = load(tmp_path / "m")
    inputs = signatures(loaded)["serving_default"]["inputs"]
    generate = InputGenerator(inputs, GraphView(loaded.graph_def))
    assert generate.needs["ids"].bound == 3
    restored = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    for seed in range(3):
        restored(ids=tf.constant(generate(64, seed)["ids"]))


def test_ids_of_feature_columns_stay_in_their_buckets():
    fc = v1.feature_column
    graph = tf.Graph()
    with graph.as_default():
        features = {
            "user": v1.placeholder(tf.int64, [None, 1], name="user"),
            "country": v1.placeholder(tf.string, [None, 1], name="country"),
            "query": v1.placeholder(tf.string, [None, 1], name="query"),
        }
        columns = [
            fc.embedding_column(fc.categorical_column_with_identity("user", 5), 3),
            fc.embedding_column(fc.categorical_column_with_vocabulary_list("country", ["us", "fr"]), 3),
            fc.embedding_column(fc.categorical_column_with_hash_bucket("query", 20), 3),
        ]
        out = fc.input_layer(features, columns)
    generate = generator_for(graph, features)
    assert generate.needs["user"].bound == 5
    with v1.Session(graph=graph) as session:
        session.run([v1.global_variables_initializer(), v1.tables_initializer()])
        for seed in range(3):
            session.run(out, {features[k]: v for k, v in generate(64, seed).items()})


def test_ids_of_keras_preprocessing_layers_stay_in_range(tmp_path):
    keras = pytest.importorskip("tf_keras")
    category = keras.Input([1], dtype="int64", name="category")
    word = keras.Input([1], dtype="string", name="word")
    encoded = keras.layers.CategoryEncoding(num_tokens=4, output_mode="one_hot")(category)  # asserts max(ids) < 4
    embedded = keras.layers.Flatten()(keras.layers.Embedding(6, 2)(keras.layers.Hashing(num_bins=6)(word)))
    tf.saved_model.save(
        keras.Model([category, word], keras.layers.Concatenate()([encoded, embedded])), str(tmp_path / "m")
    )
    from msopt.graph.contents import signatures
    from msopt.load import load

    loaded = load(tmp_path / "m")
    generate = InputGenerator(signatures(loaded)["serving_default"]["inputs"], GraphView(loaded.graph_def))
    assert generate.needs["category"].bound == 4 and generate.needs["word"].bound is None
    restored = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    for seed in range(3):
        restored(**{k: tf.constant(v) for k, v in generate(64, seed).items()})


@pytest.mark.parametrize("flow, op", [("v1", "Switch"), ("v2", "If")])
def test_a_predicate_of_unknown_rank_is_a_scalar(flow, op):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        training = v1.placeholder(tf.bool, None, name="is_training")
        (v1.disable_control_flow_v2 if flow == "v1" else v1.enable_control_flow_v2)()
        try:
            out = v1.cond(training, lambda: tf.nn.dropout(x, 0.5), lambda: x + 1.0)
        finally:
            v1.enable_control_flow_v2()
    assert any(o.type.endswith(op) for o in graph.get_operations())
    generate = run_generated(graph, {"x": x, "is_training": training}, out)
    feeds = generate(5, 0)
    assert feeds["is_training"].shape == () and not feeds["is_training"] and feeds["x"].shape == (5, 4)


def test_an_input_of_unknown_rank_takes_the_shape_its_consumer_needs():
    graph = tf.Graph()
    with graph.as_default():
        dense = v1.placeholder(tf.float32, None, name="dense")
        image = v1.placeholder(tf.float32, None, name="image")
        plain = v1.placeholder(tf.float32, None, name="plain")
        a = tf.matmul(tf.nn.relu(tf.cast(dense, tf.float32)), v1.get_variable("w", [3, 2]))
        b = tf.nn.conv2d(image, v1.get_variable("k", [3, 3, 5, 4]), 1, "SAME")
        fetches = [a, b, plain * 2.0]
    generate = run_generated(graph, {"dense": dense, "image": image, "plain": plain}, fetches, batch_size=4)
    feeds = generate(4, 0)
    assert feeds["dense"].shape == (4, 3) and feeds["image"].shape[::3] == (4, 5) and feeds["plain"].shape == (4,)


def test_strings_take_the_form_their_parsers_expect():
    graph = tf.Graph()
    with graph.as_default():
        price = v1.placeholder(tf.string, [None], name="price")
        code = v1.placeholder(tf.string, [None], name="code")
        record = v1.placeholder(tf.string, [None], name="record")
        tags = v1.placeholder(tf.string, [None], name="tags")
        words = v1.placeholder(tf.string, [None], name="words")
        a = tf.strings.to_number(price)
        b = tf.gather(tf.ones([4]), tf.strings.to_number(code, tf.int32))  # numeric ids of a 4-row table
        c = tf.io.decode_csv(record, [[0.0], [0], ["x"], [0.0]], field_delim=";")
        d = tf.strings.to_number(tf.strings.split(tags, "|").values)
        e = tf.strings.to_hash_bucket_fast(words, 10)
        fetches = [a, b, c, d, e]
    generate = run_generated(
        graph, {"price": price, "code": code, "record": record, "tags": tags, "words": words}, fetches
    )
    assert generate.needs["code"].bound == 4 and generate.needs["record"].text[0] == "csv"


def test_serialized_examples_hold_the_features_their_parse_op_reads():
    graph = tf.Graph()
    with graph.as_default():
        batch = v1.placeholder(tf.string, [None], name="examples")
        single = v1.placeholder(tf.string, [], name="example")
        spec = {
            "dense": tf.io.FixedLenFeature([3], tf.float32),
            "item": tf.io.FixedLenFeature([1], tf.int64),
            "words": tf.io.VarLenFeature(tf.string),
            "price": tf.io.FixedLenFeature([], tf.string),
            "tags": tf.io.RaggedFeature(tf.int64),
        }
        parsed = tf.io.parse_example(batch, spec)
        fetches = [
            parsed["dense"],
            tf.gather(tf.ones([4, 2]), parsed["item"]),  # ids of a 4-row table
            tf.strings.to_hash_bucket_fast(parsed["words"].values, 5),
            tf.strings.to_number(parsed["price"]),
            tf.gather(tf.ones([6]), parsed["tags"].flat_values),
        ]
        one = tf.io.parse_single_example(single, {"n": tf.io.FixedLenFeature([2], tf.int64)})
        fetches.append(tf.one_hot(one["n"], 3))
    generate = run_generated(graph, {"examples": batch, "example": single}, fetches)
    features = {name: (count, need.bound) for name, _, count, need in generate.needs["examples"].text[1]}
    assert features == {
        "dense": (3, None),
        "item": (1, 4),
        "price": (1, None),
        "words": (None, None),
        "tags": (None, 6),
    }


def test_serialized_examples_parsed_in_a_function_body(tmp_path):
    class Model(tf.Module):
        def __init__(self):
            self.table = tf.Variable(np.ones((4, 2), np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def __call__(self, examples):
            parsed = tf.io.parse_example(
                examples,
                {
                    "words": tf.io.VarLenFeature(tf.string),
                    "dense": tf.io.FixedLenFeature([3], tf.float32),
                    "item": tf.io.FixedLenFeature([1], tf.int64),
                },
            )
            return {
                "out": tf.reduce_sum(tf.gather(self.table, parsed["item"]), [1, 2]) + tf.reduce_sum(parsed["dense"], 1)
            }

    model = Model()
    tf.saved_model.save(model, str(tmp_path / "m"), signatures=model.__call__)
    from msopt.graph.contents import signatures
    from msopt.load import load

    loaded = load(tmp_path / "m")
    generate = InputGenerator(signatures(loaded)["serving_default"]["inputs"], GraphView(loaded.graph_def))
    features = {name: (count, need.bound) for name, _, count, need in generate.needs["examples"].text[1]}
    assert features == {"dense": (3, None), "item": (1, 4), "words": (None, None)}
    restored = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    for seed in range(3):
        restored(examples=tf.constant(generate(32, seed)["examples"]))


def test_an_input_the_graph_cannot_describe_names_itself_and_asks_for_inputs():
    graph = tf.Graph()
    with graph.as_default():
        image = v1.placeholder(tf.string, [], name="image")
        tf.image.decode_jpeg(image)
        ids = v1.placeholder(tf.int32, [None], name="ids")
        table = v1.placeholder(tf.float32, None, name="table")  # rows unknown to the graph
        tf.gather(table, ids)
    with pytest.raises(InputError, match=r"input 'image' is parsed by DecodeJpeg .* pass --inputs FILE.npz"):
        generator_for(graph, {"image": image})
    with pytest.raises(InputError, match=r"input 'ids' indexes a table at node 'GatherV2' .* pass --inputs FILE.npz"):
        generator_for(graph, {"ids": ids})


# -- TensorFlow's errors: one line, node and reason ----------------------------------------------------
def test_a_session_error_becomes_the_node_and_the_reason():
    graph = tf.Graph()
    with graph.as_default():
        ids = v1.placeholder(tf.int32, [None])
        out = tf.gather(tf.zeros([2, 3]), ids, name="look")
        with v1.Session() as session, pytest.raises(tf.errors.InvalidArgumentError) as caught:
            session.run(out, {ids: [5]})
    line = error_line(caught.value)
    assert line == "node 'look': indices[0] = 5 is not in [0, 2)"


def test_a_function_error_becomes_the_node_and_the_reason():
    @tf.function
    def lookup(ids):
        return tf.gather(tf.zeros([2, 3]), ids, name="look")

    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        lookup(tf.constant([7]))
    line = error_line(caught.value)
    assert "Graph execution error" not in str(line) and line.startswith("node '") and "7 is not in [0, 2)" in line
    assert "\n" not in line


# -- the command line: a failing model's error keeps its cause; real inputs fix it -------------------------
@pytest.fixture(scope="module")
def shifted_ids_model(tmp_path_factory):
    """Ids shifted by +5 before a 2-row table: no generator can see that; TensorFlow's error must show."""
    path = tmp_path_factory.mktemp("shifted") / "model"
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        ids = v1.placeholder(tf.int32, [None], name="ids")
        out = tf.gather(v1.get_variable("table", [2, 3]), ids + 5, name="lookup")
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(path))
        info = v1.saved_model.utils.build_tensor_info
        builder.add_meta_graph_and_variables(
            session,
            ["serve"],
            signature_def_map={
                "serving_default": v1.saved_model.signature_def_utils.build_signature_def(
                    {"ids": info(ids)}, {"out": info(out)}, "tensorflow/serving/predict"
                )
            },
        )
        builder.save()
    return path


def one_error_line(done):
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("msopt: error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


LOUD = {"TF_CPP_MIN_LOG_LEVEL": "0"}  # TensorFlow's runtime logs on: msopt must still hold them back


def test_run_failure_names_node_and_reason(shifted_ids_model):
    line = one_error_line(run_msopt("run", shifted_ids_model, "--device", "cpu", "-k", 1, "-w", 0, env=LOUD))
    assert "node 'lookup'" in line and "is not in [0, 2)" in line and "Graph execution error" not in line


def test_partition_verify_takes_inputs_from_npz(shifted_ids_model, tmp_path):
    args = [
        "partition",
        shifted_ids_model,
        "-n",
        "2",
        "--policy",
        "chains",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "--verify",
    ]
    line = one_error_line(run_msopt(*args, "-o", tmp_path / "a", env=LOUD))
    assert "fails on generated inputs" in line and "--inputs FILE.npz" in line and "node 'lookup'" in line
    np.savez(tmp_path / "ids.npz", ids=np.array([-5, -4, -5], np.int32))
    done = run_msopt(*args, "-o", tmp_path / "b", "--inputs", tmp_path / "ids.npz", "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert '"inputs": "' + str(tmp_path / "ids.npz") in done.stdout


def test_partition_inputs_without_verify_is_a_usage_error(shifted_ids_model, tmp_path):
    np.savez(tmp_path / "ids.npz", ids=np.zeros(3, np.int32))
    line = one_error_line(
        run_msopt("partition", shifted_ids_model, "--inputs", tmp_path / "ids.npz", "-o", tmp_path / "o")
    )
    assert "add --verify" in line and not (tmp_path / "o").exists()
