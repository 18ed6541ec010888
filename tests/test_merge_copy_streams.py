"""--merge-copy-streams on msopt run: TensorFlow's stream_merge_options in the GPU session config; no effect on CPU."""

import json

import pytest
from conftest import SAMPLES

pytestmark = pytest.mark.tf


def test_merge_sets_all_three_stream_merge_options_of_a_real_config_proto():
    import tensorflow as tf

    from msopt.runner.devices import merge_copy_streams_into

    config = merge_copy_streams_into(tf.compat.v1.ConfigProto())
    merge = config.gpu_options.experimental.stream_merge_options
    assert merge.merge_host_to_device_stream and merge.merge_device_to_host_stream
    assert merge.merge_device_to_device_stream
    parsed = tf.compat.v1.ConfigProto.FromString(config.SerializeToString())  # TensorFlow's own schema keeps them
    assert parsed.gpu_options.experimental.stream_merge_options == merge


def test_run_on_the_cpu_accepts_the_flag_and_says_it_has_no_effect(msopt):
    args = ("run", SAMPLES / "towers_tf2", "--device", "cpu", "--streams", 2, "--iterations", 2, "--warmup", 1)
    result = msopt(*args, "--merge-copy-streams", "--json")
    assert result.returncode == 0, result.stderr
    assert "no effect on the CPU" in json.loads(result.stdout)["merge_copy_streams"]
    plain = msopt(*args, "--json")
    assert plain.returncode == 0 and "merge_copy_streams" not in json.loads(plain.stdout)
