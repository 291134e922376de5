"""fetch_later: device values read on the host after the caller queued more work."""

from __future__ import annotations

import pytest
import torch

from trainer.runtime.device import fetch_later


def test_host_values_are_read_as_they_were_when_fetched():
    values = torch.tensor([1.5, float("nan")])
    read = fetch_later(values)
    values.zero_()
    assert str(read()) == "[1.5, nan]"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_values_are_the_ones_before_later_work():
    values = torch.tensor([2.0, 3.0], device="cuda")
    read = fetch_later(values)
    values.mul_(10)  # queued after the copy: not seen
    assert read() == [2.0, 3.0]
