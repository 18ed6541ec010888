#!/usr/bin/env python
"""Regenerate the sample TensorFlow models used by msopt's tests and docs.

Usage:
    python sample_models/make_samples.py [--out DIR] [--check]
    python sample_models/make_samples.py --check-only

Every model is written in a TF1 form (tf.compat.v1 graph saved with
SavedModelBuilder) and a TF2 form (tf.saved_model.save of a tf.Module or a
Keras 3 model).  All variables come from a seeded numpy generator, so a rerun
gives numerically identical variables, and the TF1 and TF2 forms of a model
hold the same values and compute the same outputs.

--check loads every SavedModel with TensorFlow, runs it on random inputs
(batch 3), compares the TF1 and TF2 forms, and checks the structural promises
made in README.md (signatures, stream ids, control-flow ops, no device pins,
no random ops).  It exits with status 1 if anything fails.
"""

import argparse
import contextlib
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1

SERVE = "serve"
SIG = "serving_default"

# ---------------------------------------------------------------------------
# helpers


def _rng(seed):
    return np.random.RandomState(seed)


def _glorot(rng, shape):
    fan_in = int(np.prod(shape[:-1]))
    fan_out = int(shape[-1]) if len(shape) > 1 else 1
    if len(shape) == 4:  # conv kernel HWIO
        receptive = shape[0] * shape[1]
        fan_in, fan_out = shape[2] * receptive, shape[3] * receptive
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def _normal(rng, shape, std):
    return (rng.standard_normal(size=shape) * std).astype(np.float32)


def _fresh_dir(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


@contextlib.contextmanager
def stream(k):
    """Stand-in for DeepRec's ``tf.stream(k)`` on stock TensorFlow.

    Every op created inside the block gets the node attribute
    ``_stream_id = k`` (an int), unless an inner ``stream`` block already set
    one, so blocks nest the way ``tf.stream`` does.  Works in a v1 graph and
    while a ``tf.function`` is being traced (the ops of a FuncGraph).
    """
    graph = v1.get_default_graph()
    before = set(op.name for op in graph.get_operations())
    yield
    for op in graph.get_operations():
        if op.name in before:
            continue
        try:
            op.get_attr("_stream_id")
            continue  # set by an inner block
        except ValueError:
            pass
        op._set_attr("_stream_id", v1.AttrValue(i=k))


def _zeros_var(name, shape, dtype=tf.float32, use_resource=True):
    """A v1 variable with a zeros initializer; the real value is fed in."""
    return v1.get_variable(
        name, shape=shape, dtype=dtype, initializer=v1.zeros_initializer(), use_resource=use_resource
    )


def _init_from(sess, values):
    """Initialize v1 variables with numpy values by feeding their initializers.

    values: list of (variable, ndarray).  Feeding the initial-value input of
    the initializer keeps the graph free of large constants and random ops.
    """
    for var, value in values:
        init = var.initializer
        sess.run(init, feed_dict={init.inputs[1]: value})


def _save_v1(sess, export_dir, inputs, outputs):
    _fresh_dir(export_dir)
    builder = v1.saved_model.Builder(export_dir)
    sig = v1.saved_model.predict_signature_def(inputs=inputs, outputs=outputs)
    builder.add_meta_graph_and_variables(sess, [SERVE], signature_def_map={SIG: sig}, clear_devices=True)
    builder.save()
    return sig


def _drop_empty_assets(export_dir):
    # git keeps no empty directories; leave the tree as it will be committed.
    assets = os.path.join(export_dir, "assets")
    if os.path.isdir(assets) and not os.listdir(assets):
        os.rmdir(assets)


def _save_v2(module, export_dir, fn):
    _fresh_dir(export_dir)
    tf.saved_model.save(module, export_dir, signatures={SIG: fn.get_concrete_function()})
    _drop_empty_assets(export_dir)


# ---------------------------------------------------------------------------
# 1. linreg: the two-stream linear regression of DeepRec's MultiStream doc

TRAIN_X = np.array(
    [
        [3.3],
        [4.4],
        [5.5],
        [6.71],
        [6.93],
        [4.168],
        [9.779],
        [6.182],
        [7.59],
        [2.167],
        [7.042],
        [10.791],
        [5.313],
        [7.997],
        [5.654],
        [9.27],
        [3.1],
    ],
    dtype=np.float32,
)
TRAIN_Y = TRAIN_X.copy()
TRAIN_Z = np.array(
    [
        [1.7],
        [2.76],
        [2.09],
        [3.19],
        [1.694],
        [1.573],
        [3.336],
        [2.596],
        [2.53],
        [1.221],
        [2.827],
        [3.465],
        [1.65],
        [2.904],
        [2.42],
        [2.94],
        [1.3],
    ],
    dtype=np.float32,
)
LINREG_STEPS = 500
LINREG_LR = 0.01


def _linreg_v1_graph():
    """Build the doc's graph in the current default graph; returns tensors."""
    with stream(0):
        X = v1.placeholder(tf.float32, [None, 1], name="X")
        W_X = _zeros_var("weight_x", [1, 1], use_resource=False)
        b = _zeros_var("bias", [1], use_resource=False)
        X_Result = tf.matmul(X, W_X)
        X_Result = tf.add(X_Result, b)
    with stream(1):
        Y = v1.placeholder(tf.float32, [None, 1], name="Y")
        W_Y = _zeros_var("weight_y", [1, 1], use_resource=False)
        Y_Result = tf.matmul(Y, W_Y)
    Z = tf.add(X_Result, Y_Result, name="z")
    return X, Y, Z, (W_X, b, W_Y)


def train_linreg():
    """Train the doc's model with GradientDescent; returns W_X, b, W_Y."""
    rng = _rng(0)
    init = [_normal(rng, [1, 1], 1.0), np.zeros([1], np.float32), _normal(rng, [1, 1], 1.0)]
    g = tf.Graph()
    with g.as_default():
        X, Y, Z, variables = _linreg_v1_graph()
        Z_ = v1.placeholder(tf.float32, [None, 1], name="Z_")
        loss = tf.reduce_sum(tf.pow(Z - Z_, 2)) / TRAIN_X.shape[0]
        train_op = v1.train.GradientDescentOptimizer(LINREG_LR).minimize(loss)
        with v1.Session(graph=g) as sess:
            _init_from(sess, list(zip(variables, init)))
            feed = {X: TRAIN_X, Y: TRAIN_Y, Z_: TRAIN_Z}
            for _ in range(LINREG_STEPS):
                sess.run(train_op, feed)
            final_loss, values = sess.run([loss, list(variables)], feed)
    print(
        "  linreg trained %d steps, loss %.4f, W_X=%.4f b=%.4f W_Y=%.4f"
        % (LINREG_STEPS, final_loss, values[0][0, 0], values[1][0], values[2][0, 0]),
        file=sys.stderr,
    )
    return values


def make_linreg_tf1(out, values):
    export_dir = os.path.join(out, "linreg_tf1")
    g = tf.Graph()
    with g.as_default():
        X, Y, Z, variables = _linreg_v1_graph()
        with v1.Session(graph=g) as sess:
            _init_from(sess, list(zip(variables, values)))
            _save_v1(sess, export_dir, {"X": X, "Y": Y}, {"z": Z})
            frozen = v1.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["z"])
    # The converted variables are new Const nodes; carry the stream ids over.
    original = {n.name: n for n in g.as_graph_def().node}
    for node in frozen.node:
        src = original.get(node.name)
        if src is not None and "_stream_id" in src.attr and "_stream_id" not in node.attr:
            node.attr["_stream_id"].CopyFrom(src.attr["_stream_id"])
    for node in frozen.node:
        node.device = ""
    pb = os.path.join(out, "linreg_frozen.pb")
    with open(pb, "wb") as f:
        f.write(frozen.SerializeToString(deterministic=True))
    tf.io.write_graph(frozen, out, "linreg_frozen.pbtxt", as_text=True)
    return export_dir


class LinReg(tf.Module):
    def __init__(self, values):
        super().__init__(name="linreg")
        self.weight_x = tf.Variable(values[0], name="weight_x")
        self.bias = tf.Variable(values[1], name="bias")
        self.weight_y = tf.Variable(values[2], name="weight_y")

    @tf.function(
        input_signature=[tf.TensorSpec([None, 1], tf.float32, name="X"), tf.TensorSpec([None, 1], tf.float32, name="Y")]
    )
    def serve(self, X, Y):
        # X and Y are function arguments here, not nodes, so they cannot
        # carry a stream id; every op built under a block gets one.
        with stream(0):
            X_Result = tf.add(tf.matmul(X, self.weight_x), self.bias)
        with stream(1):
            Y_Result = tf.matmul(Y, self.weight_y)
        return {"z": tf.add(X_Result, Y_Result, name="z")}


def make_linreg_tf2(out, values):
    export_dir = os.path.join(out, "linreg_tf2")
    m = LinReg(values)
    _save_v2(m, export_dir, m.serve)
    return export_dir


# ---------------------------------------------------------------------------
# 6. custom_op_tf1: linreg_tf1 with one op type TensorFlow does not know

UNREGISTERED_OP = "MsoptTestUnregisteredOp"


def make_custom_op_tf1(out):
    from tensorflow.core.protobuf import saved_model_pb2

    src = os.path.join(out, "linreg_tf1")
    dst = os.path.join(out, "custom_op_tf1")
    _fresh_dir(dst)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        sm.ParseFromString(f.read())
    changed = []
    for node in sm.meta_graphs[0].graph_def.node:
        # The X-branch add (stream 0) of the serving graph.
        if node.op in ("Add", "AddV2") and "_stream_id" in node.attr and node.attr["_stream_id"].i == 0:
            node.op = UNREGISTERED_OP
            changed.append(node.name)
    assert len(changed) == 1, changed
    with open(path, "wb") as f:
        f.write(sm.SerializeToString(deterministic=True))
    return dst, changed[0]


# ---------------------------------------------------------------------------
# 2. towers: the two-tower data-parallel MNIST CNN of the multi-GPU article

TOWER_LAYERS = [  # (scope, variable shapes) as slim would name them
    ("conv_1", [5, 5, 1, 8]),
    ("conv_2", [5, 5, 8, 16]),
    ("fc", [7 * 7 * 16, 32]),
    ("prob", [32, 10]),
]


def towers_values():
    rng = _rng(2)
    values = {}
    for scope, shape in TOWER_LAYERS:
        values[scope + "/weights"] = _glorot(rng, shape)
        values[scope + "/biases"] = _normal(rng, [shape[-1]], 0.01)
    return values


def _conv_net(x, var):
    """The article's conv_net, small; var(name) returns a weight."""
    x = tf.reshape(x, [-1, 28, 28, 1])
    net = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, var("conv_1/weights"), 1, "SAME"), var("conv_1/biases")))
    net = tf.nn.max_pool2d(net, 2, 2, "VALID")
    net = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(net, var("conv_2/weights"), 1, "SAME"), var("conv_2/biases")))
    net = tf.nn.max_pool2d(net, 2, 2, "VALID")
    net = tf.reshape(net, [-1, 7 * 7 * 16])
    net = tf.nn.relu(tf.nn.bias_add(tf.matmul(net, var("fc/weights")), var("fc/biases")))
    return tf.nn.bias_add(tf.matmul(net, var("prob/weights")), var("prob/biases"))


def _towers_v1_graph():
    images, logits, created = [], [], {}

    def var(name):
        scope, leaf = name.split("/")
        shape = dict(TOWER_LAYERS)[scope]
        shape = shape if leaf == "weights" else [shape[-1]]
        with v1.variable_scope(scope):
            v = _zeros_var(leaf, shape, use_resource=False)
        created["ConvNet/" + name] = v
        return v

    for i in range(2):
        image = v1.placeholder(tf.float32, [None, 28, 28, 1], name="image_%d" % i)
        images.append(image)
        with tf.name_scope("tower_%d" % i):
            with v1.variable_scope("ConvNet", reuse=v1.AUTO_REUSE):
                logits.append(tf.identity(_conv_net(image, var), name="logits"))
    mean_logits = tf.reduce_mean(tf.stack(logits), axis=0, name="mean_logits")
    return images, logits, mean_logits, created


def make_towers_tf1(out, values):
    export_dir = os.path.join(out, "towers_tf1")
    g = tf.Graph()
    with g.as_default():
        images, logits, mean_logits, created = _towers_v1_graph()
        with v1.Session(graph=g) as sess:
            _init_from(sess, [(v, values[n[len("ConvNet/") :]]) for n, v in created.items()])
            sig = _save_v1(
                sess,
                export_dir,
                {"image_0": images[0], "image_1": images[1]},
                {"logits_0": logits[0], "logits_1": logits[1], "mean_logits": mean_logits},
            )
        saver = v1.train.Saver(list(created.values()))
        meta = v1.train.export_meta_graph(graph=g, saver_def=saver.as_saver_def(), clear_devices=True)
    meta.meta_info_def.tags.append(SERVE)
    meta.signature_def[SIG].CopyFrom(sig)
    with open(os.path.join(out, "towers_tf1.meta"), "wb") as f:
        f.write(meta.SerializeToString(deterministic=True))
    return export_dir


class Towers(tf.Module):
    def __init__(self, values):
        super().__init__(name="ConvNet")
        self.weights = {n: tf.Variable(v, name=n.replace("/", "_")) for n, v in values.items()}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 28, 28, 1], tf.float32, name="image_0"),
            tf.TensorSpec([None, 28, 28, 1], tf.float32, name="image_1"),
        ]
    )
    def serve(self, image_0, image_1):
        logits = []
        for i, image in enumerate((image_0, image_1)):
            with tf.name_scope("tower_%d" % i):
                logits.append(_conv_net(image, self.weights.__getitem__))
        mean_logits = tf.reduce_mean(tf.stack(logits), axis=0, name="mean_logits")
        return {"logits_0": logits[0], "logits_1": logits[1], "mean_logits": mean_logits}


def make_towers_tf2(out, values):
    export_dir = os.path.join(out, "towers_tf2")
    m = Towers(values)
    _save_v2(m, export_dir, m.serve)
    return export_dir


# ---------------------------------------------------------------------------
# 3. stage: a DeepRec-Stage-style model, CSV-like string lines in, prob out

STAGE_FIELDS = 4  # id,category,tag|tag|...,value
STAGE_BUCKETS = 1000
STAGE_DIM = 8
STAGE_REFINE_STEPS = 3
_NUMBER_RE = r"-?[0-9]{1,9}(\.[0-9]{1,9})?"


def stage_values():
    rng = _rng(3)
    n_in = 3 * STAGE_DIM + 3
    return {
        "emb_id": _normal(rng, [STAGE_BUCKETS, STAGE_DIM], 0.1),
        "emb_category": _normal(rng, [STAGE_BUCKETS, STAGE_DIM], 0.1),
        "emb_tags": _normal(rng, [STAGE_BUCKETS, STAGE_DIM], 0.1),
        "dense_1/kernel": _glorot(rng, [n_in, 64]),
        "dense_1/bias": _normal(rng, [64], 0.01),
        "dense_2/kernel": _glorot(rng, [64, 32]),
        "dense_2/bias": _normal(rng, [32], 0.01),
        "refine/kernel": _glorot(rng, [32, 32]),
        "refine/bias": _normal(rng, [32], 0.01),
        "logit/kernel": _glorot(rng, [32, 1]),
        "logit/bias": np.zeros([1], np.float32),
    }


def _safe_number(field):
    """to_number on fields that look like numbers, 0 elsewhere; never fails."""
    ok = tf.strings.regex_full_match(field, _NUMBER_RE)
    x = tf.strings.to_number(tf.where(ok, field, "0"), tf.float32)
    return tf.sign(x) * tf.math.log1p(tf.abs(x))


def _stage_preprocess(lines):
    """The part DeepRec would hand to tf.staged: parse lines into features."""
    with tf.name_scope("preprocess"):
        padded = tf.strings.join([lines, "," * (STAGE_FIELDS - 1)])
        fields = tf.strings.split(padded, sep=",").to_tensor(default_value="", shape=[None, STAGE_FIELDS])
        f_id, f_cat, f_tags, f_val = tf.unstack(fields, STAGE_FIELDS, axis=1)
        tags = tf.strings.split(f_tags, sep="|")
        return {
            "id": tf.strings.to_hash_bucket_fast(f_id, STAGE_BUCKETS),
            "category": tf.strings.to_hash_bucket_fast(f_cat, STAGE_BUCKETS),
            "tag_ids": tf.strings.to_hash_bucket_fast(tags.values, STAGE_BUCKETS),
            "tag_rows": tags.value_rowids(),
            "tag_counts": tags.row_lengths(),
            "numeric": tf.stack(
                [_safe_number(f_id), _safe_number(f_val), tf.math.log1p(tf.cast(tf.strings.length(lines), tf.float32))],
                axis=1,
            ),
        }


def _stage_model(feat, var, while_loop):
    with tf.name_scope("model"):
        e_id = tf.nn.embedding_lookup(var("emb_id"), feat["id"])
        e_cat = tf.nn.embedding_lookup(var("emb_category"), feat["category"])
        e_tags = tf.nn.embedding_lookup(var("emb_tags"), feat["tag_ids"])
        tag_sum = tf.math.unsorted_segment_sum(e_tags, feat["tag_rows"], tf.size(feat["tag_counts"]))
        tag_count = tf.maximum(tf.cast(feat["tag_counts"], tf.float32), 1.0)[:, None]
        e_tags = tag_sum / tag_count
        x = tf.concat([e_id, e_cat, e_tags, feat["numeric"]], axis=1)
        h = tf.nn.relu(tf.matmul(x, var("dense_1/kernel")) + var("dense_1/bias"))
        h = tf.nn.relu(tf.matmul(h, var("dense_2/kernel")) + var("dense_2/bias"))

        def cond(i, _):
            return i < STAGE_REFINE_STEPS

        def body(i, h):
            r = tf.tanh(tf.matmul(h, var("refine/kernel")) + var("refine/bias"))
            return i + 1, h + 0.1 * r

        _, h = while_loop(
            cond, body, [tf.constant(0), h], shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, 32])]
        )
        logit = tf.matmul(h, var("logit/kernel")) + var("logit/bias")
        return tf.sigmoid(logit, name="prob")


def make_stage_tf1(out, values):
    export_dir = os.path.join(out, "stage_tf1")
    v1.disable_control_flow_v2()
    try:
        g = tf.Graph()
        with g.as_default():
            lines = v1.placeholder(tf.string, [None], name="lines")
            created = {}

            def var(name):
                if name not in created:
                    with v1.variable_scope("stage", reuse=v1.AUTO_REUSE):
                        created[name] = _zeros_var(name, values[name].shape)
                return created[name]

            # Create the variables outside the loop, as a layer would.
            for name in values:
                var(name)
            prob = _stage_model(_stage_preprocess(lines), var, v1.while_loop)
            with v1.Session(graph=g) as sess:
                _init_from(sess, [(created[n], values[n]) for n in values])
                _save_v1(sess, export_dir, {"lines": lines}, {"prob": prob})
    finally:
        v1.enable_control_flow_v2()
    return export_dir


class Stage(tf.Module):
    def __init__(self, values):
        super().__init__(name="stage")
        self.weights = {n: tf.Variable(v, name=n.replace("/", "_")) for n, v in values.items()}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="lines")])
    def serve(self, lines):
        prob = _stage_model(_stage_preprocess(lines), self.weights.__getitem__, tf.while_loop)
        return {"prob": prob}


def make_stage_tf2(out, values):
    export_dir = os.path.join(out, "stage_tf2")
    m = Stage(values)
    _save_v2(m, export_dir, m.serve)
    return export_dir


# ---------------------------------------------------------------------------
# 4. deepfm: a DeepFM-like recommendation model, 24 sparse + 4 dense inputs

# Rows of the C1..C24 tables: 100 to 1000, mostly small so that the Keras 3
# export (which stores every variable twice) stays well under 1 MB.
DEEPFM_SIZES = [100, 100, 100, 150, 200, 300] * 4
DEEPFM_SIZES[5] = 1000
DEEPFM_SPARSE = ["C%d" % (k + 1) for k in range(len(DEEPFM_SIZES))]
DEEPFM_DENSE = ["I%d" % (k + 1) for k in range(4)]
DEEPFM_DIM = 8
DEEPFM_HIDDEN = [64, 32]


def deepfm_values():
    rng = _rng(4)
    values = {}
    for name, size in zip(DEEPFM_SPARSE, DEEPFM_SIZES):
        values[name + "/embedding"] = _normal(rng, [size, DEEPFM_DIM], 0.05)
    values["linear/dense_kernel"] = _glorot(rng, [len(DEEPFM_DENSE), 1])
    values["linear/bias"] = np.zeros([1], np.float32)
    n_in = len(DEEPFM_SPARSE) * DEEPFM_DIM + len(DEEPFM_DENSE)
    for k, units in enumerate(DEEPFM_HIDDEN + [1]):
        values["dnn_%d/kernel" % k] = _glorot(rng, [n_in, units])
        values["dnn_%d/bias" % k] = _normal(rng, [units], 0.01)
        n_in = units
    return values


def _deepfm_v1_graph(shapes):
    sparse = {n: v1.placeholder(tf.int64, [None], name=n) for n in DEEPFM_SPARSE}
    dense = {n: v1.placeholder(tf.float32, [None], name=n) for n in DEEPFM_DENSE}
    created, embs = {}, []
    with v1.variable_scope("input_layer"):
        for name, size in zip(DEEPFM_SPARSE, DEEPFM_SIZES):
            with v1.variable_scope(name + "_embedding"):
                table = _zeros_var("embedding_weights", [size, DEEPFM_DIM])
                created[name + "/embedding"] = table
                ids = tf.math.floormod(sparse[name], tf.constant(size, tf.int64))
                embs.append(tf.nn.embedding_lookup(table, ids))
        dense_x = tf.stack([dense[n] for n in DEEPFM_DENSE], axis=1)

    for name in sorted(shapes):  # the dense layers' weights, up front
        if name not in created:
            scope, leaf = name.split("/")
            with v1.variable_scope(scope):
                created[name] = _zeros_var(leaf, shapes[name])
    var = created.__getitem__

    with tf.name_scope("linear"):
        linear_logit = tf.matmul(dense_x, var("linear/dense_kernel")) + var("linear/bias")
    with tf.name_scope("fm"):
        stacked = tf.stack(embs, axis=1)  # [B, F, D]
        square_of_sum = tf.square(tf.reduce_sum(stacked, 1))  # [B, D]
        sum_of_square = tf.reduce_sum(tf.square(stacked), 1)  # [B, D]
        fm_logit = 0.5 * tf.reduce_sum(square_of_sum - sum_of_square, 1, keepdims=True)
    with tf.name_scope("dnn"):
        h = tf.concat(embs + [dense_x], axis=1)
        for k in range(len(DEEPFM_HIDDEN) + 1):
            h = tf.matmul(h, var("dnn_%d/kernel" % k)) + var("dnn_%d/bias" % k)
            if k < len(DEEPFM_HIDDEN):
                h = tf.nn.relu(h)
    prob = tf.sigmoid(linear_logit + fm_logit + h, name="prob")
    return sparse, dense, prob, created


def make_deepfm_tf1(out, values):
    export_dir = os.path.join(out, "deepfm_tf1")
    g = tf.Graph()
    with g.as_default():
        sparse, dense, prob, created = _deepfm_v1_graph({n: v.shape for n, v in values.items()})
        assert set(created) == set(values), set(values) ^ set(created)
        with v1.Session(graph=g) as sess:
            _init_from(sess, [(created[n], values[n]) for n in values])
            _save_v1(sess, export_dir, dict(sparse, **dense), {"prob": prob})
    return export_dir


def make_deepfm_tf2(out, values):
    """The same model in Keras 3, exported with model.export()."""
    import keras
    from keras import ops

    inputs = {n: keras.Input(shape=(), dtype="int64", name=n) for n in DEEPFM_SPARSE}
    inputs.update({n: keras.Input(shape=(), dtype="float32", name=n) for n in DEEPFM_DENSE})
    emb_layers, embs = {}, []
    for name, size in zip(DEEPFM_SPARSE, DEEPFM_SIZES):
        ids = ops.mod(inputs[name], size)  # floor-mod: any int64 is valid
        emb_layers[name] = keras.layers.Embedding(size, DEEPFM_DIM, name=name + "_embedding")
        embs.append(emb_layers[name](ids))
    dense_x = ops.stack([inputs[n] for n in DEEPFM_DENSE], axis=1)
    linear_dense = keras.layers.Dense(1, name="linear")
    linear_logit = linear_dense(dense_x)
    stacked = ops.stack(embs, axis=1)
    square_of_sum = ops.square(ops.sum(stacked, axis=1))
    sum_of_square = ops.sum(ops.square(stacked), axis=1)
    fm_logit = 0.5 * ops.sum(square_of_sum - sum_of_square, axis=1, keepdims=True)
    h = keras.layers.Concatenate(axis=1)(embs + [dense_x])
    dnn = []
    for k, units in enumerate(DEEPFM_HIDDEN + [1]):
        layer = keras.layers.Dense(units, activation="relu" if k < len(DEEPFM_HIDDEN) else None, name="dnn_%d" % k)
        dnn.append(layer)
        h = layer(h)
    prob = keras.layers.Activation("sigmoid", name="prob")(linear_logit + fm_logit + h)
    model = keras.Model(inputs, {"prob": prob}, name="deepfm")

    for name in DEEPFM_SPARSE:
        emb_layers[name].set_weights([values[name + "/embedding"]])
    linear_dense.set_weights([values["linear/dense_kernel"], values["linear/bias"]])
    for k, layer in enumerate(dnn):
        layer.set_weights([values["dnn_%d/kernel" % k], values["dnn_%d/bias" % k]])

    export_dir = os.path.join(out, "deepfm_tf2")
    _fresh_dir(export_dir)
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        model.export(export_dir, format="tf_saved_model", verbose=False)
    _drop_empty_assets(export_dir)
    return export_dir


# ---------------------------------------------------------------------------
# 5. bilinear: four branches of bilinear pooling, the demo's model

BILINEAR_LOCATIONS = 128 * 128  # feature-map locations the pooling sums over
BILINEAR_CHANNELS = 4  # input channels per location
BILINEAR_DIM = 16  # channels per branch after the projection
BILINEAR_CLASSES = 10
BILINEAR_BRANCHES = 4


def bilinear_values():
    rng = _rng(5)
    c, d, k = BILINEAR_CHANNELS, BILINEAR_DIM, BILINEAR_CLASSES
    values = {}
    for i in range(BILINEAR_BRANCHES):
        values["branch_%d/proj/weights" % i] = _glorot(rng, [c, d])
        values["branch_%d/proj/biases" % i] = _normal(rng, [d], 0.01)
        values["branch_%d/fc/weights" % i] = _glorot(rng, [d * d, k])
        values["branch_%d/fc/biases" % i] = _normal(rng, [k], 0.01)
    return values


def _bilinear_v1_graph():
    """features [batch, locations, channels] -> per branch: 1x1 projection, bilinear pooling
    (the outer products of the locations' features, summed: one long, narrow contraction),
    signed square root, l2 normalization, a classifier; the mean of the branches' logits."""
    created = {}
    d = BILINEAR_DIM
    features = v1.placeholder(tf.float32, [None, BILINEAR_LOCATIONS, BILINEAR_CHANNELS], name="features")

    def var(name, shape):
        v = _zeros_var(name, shape, use_resource=False)
        created[v.op.name] = v
        return v

    logits = []
    for i in range(BILINEAR_BRANCHES):
        with v1.variable_scope("branch_%d" % i):
            with v1.variable_scope("proj"):
                proj = tf.nn.relu(tf.matmul(features, var("weights", [BILINEAR_CHANNELS, d])) + var("biases", [d]))
            pooled = tf.matmul(tf.transpose(proj, [0, 2, 1]), proj) / float(BILINEAR_LOCATIONS)
            pooled = tf.reshape(pooled, [-1, d * d])
            pooled = tf.sign(pooled) * tf.sqrt(tf.abs(pooled) + 1e-12)
            pooled = tf.math.l2_normalize(pooled, axis=1)
            with v1.variable_scope("fc"):
                logits.append(
                    tf.identity(
                        tf.matmul(pooled, var("weights", [d * d, BILINEAR_CLASSES]))
                        + var("biases", [BILINEAR_CLASSES]),
                        name="logits",
                    )
                )
    mean_logits = tf.reduce_mean(tf.stack(logits), axis=0, name="mean_logits")
    return features, logits, mean_logits, created


def make_bilinear_tf1(out, values):
    export_dir = os.path.join(out, "bilinear_tf1")
    g = tf.Graph()
    with g.as_default():
        features, logits, mean_logits, created = _bilinear_v1_graph()
        with v1.Session(graph=g) as sess:
            _init_from(sess, [(v, values[n]) for n, v in created.items()])
            outputs = {"logits_%d" % i: t for i, t in enumerate(logits)}
            outputs["mean_logits"] = mean_logits
            _save_v1(sess, export_dir, {"features": features}, outputs)
    return export_dir


# ---------------------------------------------------------------------------
# generation


def generate(out):
    os.makedirs(out, exist_ok=True)
    print("writing sample models to %s" % out, file=sys.stderr)
    linreg = train_linreg()
    make_linreg_tf1(out, linreg)
    make_linreg_tf2(out, linreg)
    make_custom_op_tf1(out)
    towers = towers_values()
    make_towers_tf1(out, towers)
    make_towers_tf2(out, towers)
    stage = stage_values()
    make_stage_tf1(out, stage)
    make_stage_tf2(out, stage)
    deepfm = deepfm_values()
    make_deepfm_tf1(out, deepfm)
    make_deepfm_tf2(out, deepfm)
    make_bilinear_tf1(out, bilinear_values())


# ---------------------------------------------------------------------------
# --check

SAVED_MODELS = [
    "linreg_tf1",
    "linreg_tf2",
    "towers_tf1",
    "towers_tf2",
    "stage_tf1",
    "stage_tf2",
    "deepfm_tf1",
    "deepfm_tf2",
    "bilinear_tf1",
]
V1_CONTROL_FLOW = {"Enter", "Exit", "Merge", "Switch", "NextIteration"}
BATCH = 3


def _random_lines(rng, n):
    words = ["foo", "bar", "baz", "qux", "", "12", "-3.5", "x|y", "1e9", "\u00e9t\u00e9", "99999999999999999999", "a,b"]
    lines = []
    for i in range(n):
        if i == 0:
            lines.append("12,foo,bar|baz,0.5")  # the documented shape
            continue
        k = rng.randint(0, 7)
        lines.append(",".join("|".join(rng.choice(words) for _ in range(rng.randint(1, 3))) for _ in range(k)))
    return np.array([s.encode("utf-8") for s in lines], dtype=object)


def random_inputs(signature_inputs, rng, batch=BATCH):
    """Random feeds for {name: (tf.DType, shape list with -1 for None)}."""
    feeds = {}
    for name, (dtype, shape) in sorted(signature_inputs.items()):
        shape = [batch if d in (-1, None) else d for d in shape]
        if dtype == tf.string:
            feeds[name] = _random_lines(rng, int(np.prod(shape))).reshape(shape)
        elif dtype.is_integer:
            feeds[name] = rng.randint(-(2**62), 2**62, size=shape, dtype=np.int64).astype(dtype.as_numpy_dtype)
        else:
            feeds[name] = rng.standard_normal(size=shape).astype(dtype.as_numpy_dtype)
    return feeds


def _all_nodes(meta_graph):
    """(where, node) for the main graph and every function body."""
    for node in meta_graph.graph_def.node:
        yield "graph", node
    for fn in meta_graph.graph_def.library.function:
        for node in fn.node_def:
            yield fn.signature.name, node


def _read_saved_model(path):
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    return sm


def _sig_inputs(sig):
    return {k: (tf.as_dtype(t.dtype), [d.size for d in t.tensor_shape.dim]) for k, t in sig.inputs.items()}


class Checker:
    def __init__(self):
        self.failures = []

    def expect(self, ok, what):
        print("  %s %s" % ("ok  " if ok else "FAIL", what), file=sys.stderr)
        if not ok:
            self.failures.append(what)


def _check_structure(c, name, sm):
    mg = sm.meta_graphs[0]
    c.expect(SERVE in mg.meta_info_def.tags, "%s: tag serve" % name)
    c.expect(SIG in mg.signature_def, "%s: signature %s" % (name, SIG))
    sig = mg.signature_def[SIG]
    for kind, infos in (("input", sig.inputs), ("output", sig.outputs)):
        for key, info in infos.items():
            dims = [d.size for d in info.tensor_shape.dim]
            c.expect(
                info.dtype != 0 and not info.tensor_shape.unknown_rank and dims[:1] == [-1],
                "%s: %s %s has dtype, shape, batch None (%s %s)"
                % (name, kind, key, tf.as_dtype(info.dtype).name, dims),
            )
    nodes = list(_all_nodes(mg))
    # tf.saved_model.save pins its own checkpoint machinery to the CPU (the
    # main graph's Const holding the saver's file name, and the functions
    # _traced_save/_traced_restore); every TF2 SavedModel has those.  The
    # model itself must be unpinned.
    pinned = [
        n.name
        for w, n in nodes
        if n.device
        and not (
            "_traced_save_" in w
            or "_traced_restore_" in w
            or (w == "graph" and n.op == "Const" and n.name in ("Const", "saver_filename"))
        )
    ]
    c.expect(not pinned, "%s: no device pins %s" % (name, pinned[:3]))
    rand = [n.name for _, n in nodes if "Random" in n.op]
    c.expect(not rand, "%s: no random ops %s" % (name, rand[:3]))
    n_fn = len(mg.graph_def.library.function)
    n_fn_nodes = sum(len(f.node_def) for f in mg.graph_def.library.function)
    print(
        "       %d nodes in graph, %d functions with %d nodes" % (len(mg.graph_def.node), n_fn, n_fn_nodes),
        file=sys.stderr,
    )
    return mg, nodes


def _run_v1(path, feeds):
    g = tf.Graph()
    with v1.Session(graph=g) as sess:
        mg = v1.saved_model.loader.load(sess, [SERVE], path)
        sig = mg.signature_def[SIG]
        fd = {sig.inputs[k].name: v for k, v in feeds.items()}
        names = sorted(sig.outputs)
        vals = sess.run([sig.outputs[k].name for k in names], fd)
    return dict(zip(names, vals))


def _run_v2(path, feeds):
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures[SIG]
    res = fn(**{k: tf.constant(v) for k, v in feeds.items()})
    return {k: v.numpy() for k, v in res.items()}


def check(out):
    c = Checker()
    rng = np.random.RandomState(1234)
    results = {}
    for name in SAVED_MODELS:
        path = os.path.join(out, name)
        print("%s" % name, file=sys.stderr)
        sm = _read_saved_model(path)
        mg, nodes = _check_structure(c, name, sm)
        feeds = random_inputs(_sig_inputs(mg.signature_def[SIG]), rng)
        base = name.rsplit("_", 1)[0]
        if base in results:  # the TF2 form gets the TF1 form's inputs
            feeds = results[base][0]
        run = _run_v1 if name.endswith("_tf1") else _run_v2
        try:
            outs = run(path, feeds)
        except Exception as e:  # noqa: BLE001
            c.expect(False, "%s: runs (%s)" % (name, e))
            continue
        finite = all(np.all(np.isfinite(v)) for v in outs.values())
        shapes = {k: list(v.shape) for k, v in outs.items()}
        c.expect(
            finite and all(s[0] == BATCH for s in shapes.values()), "%s: runs on batch %d -> %s" % (name, BATCH, shapes)
        )
        outs2 = run(path, feeds)
        c.expect(all(np.array_equal(outs[k], outs2[k]) for k in outs), "%s: deterministic" % name)
        if base in results:
            ref = results[base][1]
            c.expect(
                set(ref) == set(outs) and all(np.allclose(ref[k], outs[k], rtol=1e-4, atol=1e-5) for k in ref),
                "%s: same outputs as %s_tf1" % (name, base),
            )
        else:
            results[base] = (feeds, outs)

        streams = [(n.op, n.attr["_stream_id"].i) for _, n in nodes if "_stream_id" in n.attr]
        if base == "linreg":
            c.expect(
                {("MatMul", 0), ("MatMul", 1)} <= set(streams),
                "%s: _stream_id 0 and 1 on %d nodes" % (name, len(streams)),
            )
        else:
            c.expect(not streams, "%s: no _stream_id" % name)
        cf = {n.op for _, n in nodes} & V1_CONTROL_FLOW
        if name == "stage_tf1":
            c.expect(cf == V1_CONTROL_FLOW, "%s: v1 control flow ops %s" % (name, sorted(cf)))
        if name == "stage_tf2":
            c.expect(any(n.op in ("While", "StatelessWhile") for _, n in nodes), "%s: functional While" % name)

    # custom_op_tf1: parses, but TensorFlow refuses to load it.
    print("custom_op_tf1", file=sys.stderr)
    path = os.path.join(out, "custom_op_tf1")
    sm = _read_saved_model(path)
    c.expect(
        any(n.op == UNREGISTERED_OP for n in sm.meta_graphs[0].graph_def.node),
        "custom_op_tf1: has %s" % UNREGISTERED_OP,
    )
    try:
        _run_v1(path, results["linreg"][0])
        c.expect(False, "custom_op_tf1: TensorFlow refuses to load it")
    except Exception as e:  # noqa: BLE001
        c.expect("Op type not registered" in str(e), "custom_op_tf1: load fails with 'Op type not registered'")

    # linreg_frozen.pb / .pbtxt: import and run, same result as linreg_tf1.
    from google.protobuf import text_format

    feeds, ref = results["linreg"]
    for fname in ("linreg_frozen.pb", "linreg_frozen.pbtxt"):
        print(fname, file=sys.stderr)
        gd = tf.compat.v1.GraphDef()
        with open(os.path.join(out, fname), "rb") as f:
            data = f.read()
        if fname.endswith(".pbtxt"):
            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
        ops = {n.op for n in gd.node}
        c.expect(
            "VariableV2" not in ops and "VarHandleOp" not in ops, "%s: no variables (%d nodes)" % (fname, len(gd.node))
        )
        sids = {n.name: n.attr["_stream_id"].i for n in gd.node if "_stream_id" in n.attr}
        c.expect(
            sids.get("weight_x") == 0 and sids.get("weight_y") == 1,
            "%s: _stream_id kept on %d nodes" % (fname, len(sids)),
        )
        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(gd, name="")
        with v1.Session(graph=g) as sess:
            z = sess.run("z:0", {"X:0": feeds["X"], "Y:0": feeds["Y"]})
        c.expect(np.allclose(z, ref["z"]), "%s: runs, same z" % fname)

    # towers_tf1.meta: a MetaGraphDef that import_meta_graph accepts.
    print("towers_tf1.meta", file=sys.stderr)
    from tensorflow.core.protobuf import meta_graph_pb2

    meta = meta_graph_pb2.MetaGraphDef()
    with open(os.path.join(out, "towers_tf1.meta"), "rb") as f:
        meta.ParseFromString(f.read())
    c.expect(SIG in meta.signature_def, "towers_tf1.meta: signature")
    g = tf.Graph()
    with g.as_default():
        saver = v1.train.import_meta_graph(meta)
        with v1.Session(graph=g) as sess:
            saver.restore(sess, os.path.join(out, "towers_tf1", "variables", "variables"))
            sig = meta.signature_def[SIG]
            feeds, ref = results["towers"]
            got = sess.run(sig.outputs["mean_logits"].name, {sig.inputs[k].name: v for k, v in feeds.items()})
    c.expect(np.allclose(got, ref["mean_logits"]), "towers_tf1.meta: runs with towers_tf1's variables")

    if c.failures:
        print("%d check(s) failed" % len(c.failures), file=sys.stderr)
        return 1
    print("all checks passed", file=sys.stderr)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Regenerate msopt's sample TensorFlow models.",
        epilog="example: python sample_models/make_samples.py --check",
    )
    parser.add_argument(
        "--out",
        default=os.path.dirname(os.path.abspath(__file__)),
        help="output directory (default: the directory of this script)",
    )
    parser.add_argument("--check", action="store_true", help="after generating, load and run every model")
    parser.add_argument("--check-only", action="store_true", help="only check the models already in --out")
    args = parser.parse_args(argv)
    if not args.check_only:
        generate(args.out)
    if args.check or args.check_only:
        return check(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
