"""A zoo of real models built by libraries at test time: inspect, partition --verify with each policy that applies, run, visualize.

Every command runs on generated inputs and must succeed with a silent stderr (no TensorFlow log lines).
A model that fails is a failing test, never a skipped one.
"""

import json

import pytest
from conftest import keras_application, run_msopt, transformer_encoder
from zoo_models import zoo_model

pytestmark = [pytest.mark.tf, pytest.mark.slow]  # real architectures, built once (minutes)

# model -> the policies tested on it: embedding where there are embeddings, stage where strings are parsed
# upstream of the model, chains (a real multi-stream plan) everywhere but where embedding already splits the
# model, and auto (which keeps these small models on one stream) on two of them, to bound the time.
POLICIES = {
    "din": ["chains", "embedding"],  # deepctr DIN: attention over behaviour sequences, a 2-row table
    "deepfm": ["auto", "embedding"],  # deepctr DeepFM
    "tf1_training": ["auto", "chains"],  # TF1 training graph: is_training of unknown rank, v1 cond/while, batch norm
    "lookup": ["chains", "embedding", "stage"],  # hash tables, hash buckets, parsed strings
    "mobilenet_v2": ["chains"],  # keras.applications (tf-keras), 96x96
    "keras3_mobilenet_v3": ["chains"],  # keras.applications in Keras 3 (model.export), 64x64
    "transformer": ["chains"],  # a BERT-style encoder (tf-keras layers; test_fusion checks it further)
}
_built = {}


def model_path(name):
    if name not in _built:
        if name == "mobilenet_v2":
            _built[name] = keras_application("MobileNetV2", input_shape=(96, 96, 3))
        elif name == "transformer":
            _built[name] = transformer_encoder()
        else:
            _built[name] = zoo_model(name)
    return _built[name]


def ok(done):
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # nothing from TensorFlow's logs
    return done.stdout


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_zoo_inspect_run_visualize(name, tmp_path):
    path = model_path(name)
    info = json.loads(ok(run_msopt("inspect", path, "--json")))
    assert info["signatures"]["serving_default"]["inputs"]
    report = json.loads(ok(run_msopt("run", path, "--device", "cpu", "-n", 2, "-k", 3, "-w", 1, "-b", 4, "--json")))
    assert report["steps"] == 3 and report["inputs"]["source"] == "generated"
    picture = tmp_path / f"{name}.html"
    ok(run_msopt("visualize", path, "--policy", "chains", "-n", 2, "-o", picture))
    assert picture.stat().st_size > 0


@pytest.mark.parametrize("name, policy", [(n, p) for n, policies in sorted(POLICIES.items()) for p in policies])
def test_zoo_partition_verifies_bitwise(name, policy, tmp_path):
    out = tmp_path / "out"
    report = json.loads(
        ok(
            run_msopt(
                "partition",
                model_path(name),
                "-n",
                2,
                "--policy",
                policy,
                "--placement",
                "device",
                "--device-type",
                "cpu",
                "--verify",
                "-o",
                out,
                "--json",
            )
        )
    )
    assert report["verify"]["ok"] and report["verify"]["max_abs_diff"] == 0, report["verify"]
    assert report["verify"]["inputs"] == "generated"
