"""tests/conftest.py's choice of the tests' Kafka in auto mode (:func:`tests.conftest.choose_kafka_source`):
testcontainers only on an engine that answers, has a ``bridge`` network and has (or can pull) the images; the
local broker otherwise, with the reason. The image check may pull for seconds, so it is asked only when everything
else holds. The same choice on a real bridge-less engine: tests/deploy/test_image.py."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.conftest import choose_kafka_source


class ImageCheck:
    """The image check as the decision sees it: records whether it was asked, answers ``missing``."""

    def __init__(self, missing: Mapping[str, str]) -> None:
        self.missing, self.asked = dict(missing), 0

    def __call__(self) -> Mapping[str, str]:
        self.asked += 1
        return self.missing


@pytest.mark.parametrize(
    ("answers", "bridge", "reason"),
    [
        (False, None, "no Docker engine answers"),
        (True, None, "networks cannot be listed"),
        (True, False, "no 'bridge' network"),
    ],
)
def test_no_engine_or_no_bridge_means_the_local_broker_without_asking_for_images(answers, bridge, reason):
    images = ImageCheck({})
    use, why = choose_kafka_source(answers, bridge, images)
    assert use is False
    assert reason in why
    assert images.asked == 0


def test_missing_images_mean_the_local_broker_with_each_reason():
    images = ImageCheck({"cp-kafka:7": "not present and cannot be pulled: no registry", "ryuk:0.8": "timeout"})
    use, why = choose_kafka_source(True, True, images)
    assert use is False and images.asked == 1
    assert "cp-kafka:7: not present and cannot be pulled: no registry" in why and "ryuk:0.8: timeout" in why


def test_an_engine_with_a_bridge_and_the_images_means_testcontainers():
    images = ImageCheck({})
    use, why = choose_kafka_source(True, True, images)
    assert use is True and images.asked == 1
    assert "bridge" in why
