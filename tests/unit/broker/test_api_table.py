"""docs/features.md's table of the Kafka APIs served is the broker's own: each key, name and version range."""

import os
import re

from freshet.broker.server import _api_table
from freshet.broker.wire import protocol

FEATURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "features.md")


def test_features_list_every_api_key_with_the_versions_served():
    with open(FEATURES) as f:
        text = f.read()
    section = text.split("## Kafka APIs served", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for key, name, low, high in re.findall(r"\| (\d+) \| (\w+) \| (\d+)(?:–(\d+))? ", section):
        listed[int(key)] = (name, int(low), int(high or low))
    served = {key: (protocol.request_schema(key, high).__name__.removesuffix("Request"), low, high)
              for key, (low, high, _) in _api_table().items()}
    assert listed == served
