"""The models the calibration maps published figures onto, built by libraries (no weights) and cached on disk."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

# A Criteo-shaped DeepFM: 26 categorical and 13 dense features (the Criteo display-ads layout that
# DLRM and DeepFM papers use), deepctr's defaults otherwise (embedding_dim 4 as in deepctr's Criteo
# example, DNN 256-128-64). NVIDIA's PRs and StreamRec name the model class, not its exact size:
# this size is an assumption.
DEEPFM_CRITEO = """
from deepctr.feature_column import DenseFeat, SparseFeat
from deepctr.models import DeepFM
columns = [SparseFeat(f"C{i}", 1000, embedding_dim=4) for i in range(1, 27)]
columns += [DenseFeat(f"I{i}", 1) for i in range(1, 14)]
tf.saved_model.save(DeepFM(columns, columns), target + ".building")
"""


def keras_application(name):
    """A keras.applications model saved as a TF2 SavedModel (the tests' cache)."""
    from conftest import keras_application as build

    return build(name)


def deepfm_criteo():
    """The Criteo-shaped DeepFM SavedModel, built once into the tests' cache."""
    from conftest import CACHE, built_once
    from zoo_models import PRELUDE

    target = CACHE / "zoo" / "deepfm_criteo"

    def build():
        shutil.rmtree(str(target) + ".building", ignore_errors=True)
        code = PRELUDE + DEEPFM_CRITEO + "os.replace(target + '.building', target)\n"
        done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"building deepfm_criteo failed:\n{done.stderr[-2000:]}")

    return built_once(target, build)


BUILDERS = {
    "InceptionV3": lambda: keras_application("InceptionV3"),
    "NASNetLarge": lambda: keras_application("NASNetLarge"),
    "NASNetMobile": lambda: keras_application("NASNetMobile"),
    "DeepFM-Criteo": deepfm_criteo,
}


def model_path(name):
    return BUILDERS[name]()
