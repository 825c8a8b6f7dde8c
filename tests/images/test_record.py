"""An image's record for the digest map: the CUDA toolkit its config names."""

from __future__ import annotations

import pytest

from ferry.images.record import cuda_version


@pytest.mark.parametrize(
    ("config", "cuda"),
    [
        ({"config": {"Env": ["PATH=/bin", "CUDA_VERSION=12.4.1"]}}, "12.4.1"),
        ({"config": {"Env": ["NV_CUDA_LIB_VERSION=12.2.0-1"]}}, "12.2.0"),
        ({"config": {"Labels": {"com.nvidia.cuda.version": "11.8.0"}}}, "11.8.0"),
        ({"config": {"Env": ["PATH=/bin"]}}, None),
        (None, None),
    ],
)
def test_cuda_fingerprint(config, cuda) -> None:
    assert cuda_version(config) == cuda
