"""DeepRec's MultiStream best-practice example (two-stream linear regression), ported to msopt.stream on stock TensorFlow.

The only changes from DeepRec's version: ``tf.stream`` becomes ``msopt.stream``; DeepRec's
``use_multi_stream`` / ``multi_stream_num`` ConfigProto fields become ``msopt.stream.session_config``
(one virtual device per stream); ``msopt.stream.place`` puts each stream on its device
(DeepRec does it inside the session); and the random seed is fixed so runs can be compared.

    python examples/deeprec_linreg.py --device-type cpu            # 2 streams on 2 logical CPU devices
    python examples/deeprec_linreg.py --device-type cpu --no-streams --json
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import msopt  # noqa: E402

v1 = tf.compat.v1

train_X = np.array(
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
train_Y = np.array(
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
train_Z = np.array(
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


def build(use_streams):
    """The example's graph; with use_streams False the stream blocks are plain no-ops."""
    stream = msopt.stream if use_streams else (lambda i: _nothing())
    total_samples = train_X.shape[0]
    Z_ = v1.placeholder(tf.float32, [None, 1])
    with stream(0):
        X = v1.placeholder(tf.float32, [None, 1])
        W_X = tf.Variable(v1.random_normal([1, 1]), name="weight_x")
        b = tf.Variable(tf.zeros([1]), name="bias")
        X_Result = tf.matmul(X, W_X)
        X_Result = tf.add(X_Result, b)
    with stream(1):
        Y = v1.placeholder(tf.float32, [None, 1])
        W_Y = tf.Variable(v1.random_normal([1, 1]), name="weight_y")
        Y_Result = tf.matmul(Y, W_Y)
    Z = X_Result + Y_Result
    loss = tf.reduce_sum(tf.pow(Z - Z_, 2)) / total_samples
    train_op = v1.train.GradientDescentOptimizer(0.01).minimize(loss)
    return {"X": X, "Y": Y, "Z_": Z_, "W_X": W_X, "b": b, "W_Y": W_Y, "loss": loss, "train_op": train_op}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def train(steps=1000, log_step=100, use_streams=True, device_type="gpu", run_metadata=None):
    """Train; returns the logged losses, final values and the device each op ran on (last step)."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        t = build(use_streams)
        if use_streams:
            msopt.stream.place(graph, streams=2, device_type=device_type)
        config = msopt.stream.session_config(2, use_multi_stream=use_streams, device_type=device_type)
        feed = {t["X"]: train_X, t["Y"]: train_Y, t["Z_"]: train_Z}
        losses = []
        with v1.Session(graph=graph, config=config) as sess:
            sess.run(v1.global_variables_initializer())
            for step in range(steps):
                options = v1.RunOptions(output_partition_graphs=True) if step == steps - 1 else None
                metadata = v1.RunMetadata() if step == steps - 1 else None
                sess.run(t["train_op"], feed_dict=feed, options=options, run_metadata=metadata)
                if step % log_step == 0:
                    losses.append(float(sess.run(t["loss"], feed_dict=feed)))
            final_loss = float(sess.run(t["loss"], feed_dict=feed))
            w_x, b, w_y = sess.run([t["W_X"], t["b"], t["W_Y"]])
    executed = {n.name: n.device.rpartition("/")[2] for g in metadata.partition_graphs for n in g.node}
    return {
        "losses": losses,
        "final_loss": final_loss,
        "w_x": float(w_x.ravel()[0]),
        "b": float(b.ravel()[0]),
        "w_y": float(w_y.ravel()[0]),
        "partition_graphs": len(metadata.partition_graphs),
        "executed_devices": executed,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--device-type", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--no-streams", action="store_true", help="run the same graph on one device")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document")
    args = parser.parse_args(argv)
    result = train(args.steps, use_streams=not args.no_streams, device_type=args.device_type)
    if args.json:
        print(json.dumps(result))
        return
    for i, loss in enumerate(result["losses"]):
        print(f"Step:{i * 100}, loss=={loss:.4f}")
    print(f"Linear Regression Model: Z={result['w_x']:.4f}*X + {result['w_y']:.4f}*Y + {result['b']:.4f}")
    print(f"ran in {result['partition_graphs']} partition graph(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
