"""Kept so that ``from recordbeam.sink import WriteShards`` keeps working.

The sink lives in :mod:`recordbeam.write.sink`.
"""

from recordbeam.write.sink import (
    Encoded,
    ExampleEncoder,
    RejectLimitExceeded,
    ShardOptions,
    ShardResult,
    WriteShards,
)

__all__ = ["Encoded", "ExampleEncoder", "RejectLimitExceeded", "ShardOptions", "ShardResult",
           "WriteShards"]
