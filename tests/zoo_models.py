"""Real models built by libraries at test time (no weights downloaded), cached on disk between runs."""

import shutil
import subprocess
import sys

from conftest import CACHE, built_once

PRELUDE = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
tf.random.set_seed(0)
np.random.seed(0)
target = sys.argv[1]
"""

# deepctr's Deep Interest Network: attention over a behaviour sequence; 'gender' has a 2-row table.
DIN = """
from deepctr.feature_column import DenseFeat, SparseFeat, VarLenSparseFeat
from deepctr.models import DIN
columns = [SparseFeat("user", 3, embedding_dim=10), SparseFeat("gender", 2, embedding_dim=4),
           SparseFeat("item_id", 4, embedding_dim=8), SparseFeat("cate_id", 3, embedding_dim=4), DenseFeat("pay_score", 1)]
columns += [VarLenSparseFeat(SparseFeat("hist_item_id", 4, embedding_dim=8, embedding_name="item_id"), maxlen=4,
                             length_name="seq_length"),
            VarLenSparseFeat(SparseFeat("hist_cate_id", 3, embedding_dim=4, embedding_name="cate_id"), maxlen=4,
                             length_name="seq_length")]
tf.saved_model.save(DIN(columns, ["item_id", "cate_id"]), target + ".building")
"""

# deepctr's DeepFM over sparse features of different vocabulary sizes and two dense ones.
DEEPFM = """
from deepctr.feature_column import DenseFeat, SparseFeat
from deepctr.models import DeepFM
sizes = {"C1": 3, "C2": 17, "C3": 5, "C4": 40}
columns = [SparseFeat(name, size, embedding_dim=4) for name, size in sizes.items()]
columns += [DenseFeat("I1", 1), DenseFeat("I2", 1)]
tf.saved_model.save(DeepFM(columns, columns, dnn_hidden_units=(32, 16)), target + ".building")
"""

# A TF1 training graph: a bool is_training placeholder of unknown rank steering v1 control flow
# (tf.cond, batch norm's training switch) and a v1 while_loop, saved with SavedModelBuilder.
TF1_TRAINING = """
tf.compat.v1.disable_eager_execution()
tf.compat.v1.disable_control_flow_v2()
v1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    x = v1.placeholder(tf.float32, [None, 8], name="x")
    is_training = v1.placeholder(tf.bool, shape=None, name="is_training")
    h = v1.layers.dense(x, 16, activation=tf.nn.relu, name="dense1")
    h = v1.layers.batch_normalization(h, training=is_training, name="bn")
    h = v1.cond(is_training, lambda: h * 0.5, lambda: h + 1.0, name="scale")
    i0 = tf.constant(0)
    _, h = v1.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, tf.tanh(t) + 0.1), [i0, h], name="refine")
    logits = v1.layers.dense(h, 2, name="head")
    loss = v1.losses.sparse_softmax_cross_entropy(tf.zeros_like(tf.argmax(logits, 1)), logits)
    with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    probs = tf.nn.softmax(logits, name="probs")
    with v1.Session(graph=graph) as session:
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(target + ".building")
        info = v1.saved_model.utils.build_tensor_info
        signature = v1.saved_model.signature_def_utils.build_signature_def(
            inputs={"x": info(x), "is_training": info(is_training)}, outputs={"probs": info(probs)},
            method_name="tensorflow/serving/predict")
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
"""

# Lookup tables and string features: a static hash table, hash buckets, numbers and CSV records
# parsed from strings, split tokens, and integer ids brought into range by FloorMod.
LOOKUP = """
class Features(tf.Module):
    def __init__(self):
        keys = tf.constant(["us", "fr", "de", "jp"])
        self.country = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.range(4, dtype=tf.int64)), -1)
        rng = np.random.default_rng(0)
        self.country_emb = tf.Variable(rng.standard_normal((5, 4)).astype(np.float32), name="country_emb")
        self.query_emb = tf.Variable(rng.standard_normal((20, 4)).astype(np.float32), name="query_emb")
        self.item_emb = tf.Variable(rng.standard_normal((7, 4)).astype(np.float32), name="item_emb")
        self.slot_emb = tf.Variable(rng.standard_normal((6, 4)).astype(np.float32), name="slot_emb")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="country"),
                                  tf.TensorSpec([None], tf.string, name="query"),
                                  tf.TensorSpec([None], tf.string, name="price"),
                                  tf.TensorSpec([None], tf.string, name="record"),
                                  tf.TensorSpec([None], tf.string, name="tags"),
                                  tf.TensorSpec([None], tf.int64, name="item"),
                                  tf.TensorSpec([None, 2], tf.int32, name="slot")])
    def __call__(self, country, query, price, record, tags, item, slot):
        c = tf.gather(self.country_emb, self.country.lookup(country) + 1)
        q = tf.gather(self.query_emb, tf.strings.to_hash_bucket_fast(query, 20))
        p = tf.expand_dims(tf.strings.to_number(price, tf.float32), 1)
        a, b, d = tf.io.decode_csv(record, [[0.0], [0], ["x"]])
        r = tf.stack([a, tf.cast(b, tf.float32), tf.cast(tf.strings.length(d), tf.float32)], 1)
        tokens = tf.strings.split(tags, ",")
        t = tf.expand_dims(tf.cast(tokens.row_lengths(), tf.float32), 1)
        i = tf.gather(self.item_emb, tf.math.floormod(item, 7))
        s = tf.reduce_sum(tf.nn.embedding_lookup(self.slot_emb, tf.reshape(tf.cast(slot, tf.int64), [-1, 2])), 1)
        return {"score": tf.concat([c + q + i + s, p, r, t], 1)}

module = Features()
tf.saved_model.save(module, target + ".building", signatures=module.__call__)
"""

# keras.applications in Keras 3 (not tf-keras): a few large functions instead of one per layer; model.export.
KERAS3_APPLICATION = """
import keras
keras.utils.set_random_seed(0)
keras.applications.MobileNetV3Small(weights=None, input_shape=(64, 64, 3)).export(target + ".building", verbose=False)
"""

BUILDERS = {
    "keras3_mobilenet_v3": KERAS3_APPLICATION,
    "din": DIN,
    "deepfm": DEEPFM,
    "tf1_training": TF1_TRAINING,
    "lookup": LOOKUP,
}


def zoo_model(name):
    """The SavedModel ``name`` of BUILDERS, built once and cached under the repository's .cache/."""
    target = CACHE / "zoo" / name

    def build():
        shutil.rmtree(str(target) + ".building", ignore_errors=True)
        code = PRELUDE + BUILDERS[name] + "os.replace(target + '.building', target)\n"
        done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"building zoo model {name} failed:\n{done.stderr[-3000:]}")

    return built_once(target, build)
