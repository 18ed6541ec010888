"""Shared test fixtures: the sample models, the CLI (in a subprocess or in-process) and cached Keras models."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
CACHE = Path(os.environ.get("MSOPT_TEST_CACHE", ROOT / ".cache" / "test-models"))


def run_msopt(*args, cwd=None, env=None, timeout=600):
    """Run the real command line in a fresh process (own TensorFlow state); returns CompletedProcess."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run([sys.executable, "-m", "msopt", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=timeout)


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


def keras_application(name, **kwargs):
    """A keras.applications model (weights=None) saved as a TF2 SavedModel with tf-keras, cached on disk.

    tf-keras saves one function per layer (thousands for NASNetMobile): the many-function case.
    """
    target = CACHE / name
    if (target / "saved_model.pb").exists():
        return target
    code = (
        "import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL']='2'\n"
        "import tensorflow as tf, tf_keras as keras\n"
        f"m = getattr(keras.applications, {name!r})(weights=None, **{kwargs!r})\n"
        "tmp = sys.argv[1] + '.partial'\n"
        "tf.saved_model.save(m, tmp)\n"
        "os.replace(tmp, sys.argv[1])\n"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(str(target) + ".partial", ignore_errors=True)
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, capture_output=True, timeout=900)
    return target


@pytest.fixture(scope="session")
def nasnet_mobile():
    return keras_application("NASNetMobile")


@pytest.fixture(scope="session")
def mobilenet_v2():
    return keras_application("MobileNetV2", input_shape=(96, 96, 3))
