"""Makes `import tensorflow` fail loudly in a test run that deselected the `tf` marker.

conftest.py installs the finder in the test process; for the Python processes tests start, it puts this
folder first on PYTHONPATH, so Python imports this file at start-up (no other sitecustomize is shadowed on
the machines the suite runs on; one further along sys.path would be). The variable names the running test.
"""

import os
import sys

VARIABLE = "MSOPT_TEST_FORBID_TF"
FORBIDDEN = ("tensorflow", "tf_keras", "keras")


class ForbidTensorFlow:
    """A meta-path finder that refuses TensorFlow and Keras, naming the test that imported them."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            test = os.environ.get(VARIABLE) or "a test"
            raise ImportError(
                f"{test} imports {name} in a run without the 'tf' marker: mark its module "
                "`pytestmark = pytest.mark.tf` (or the test `@pytest.mark.tf`)"
            )
        return None


def install():
    if not any(isinstance(finder, ForbidTensorFlow) for finder in sys.meta_path):
        sys.meta_path.insert(0, ForbidTensorFlow())


if os.environ.get(VARIABLE):
    install()
