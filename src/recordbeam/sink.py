"""Kept so that ``from recordbeam.sink import WriteShards`` keeps working.

The sink lives in :mod:`recordbeam.write.sink`, its encoder protocol in
:mod:`recordbeam.write.encoder` and its commit in :mod:`recordbeam.write.commit`.
"""

from recordbeam.write.commit import RejectLimitExceeded, ShardResult
from recordbeam.write.encoder import Encoded, ExampleEncoder
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

__all__ = ["Encoded", "ExampleEncoder", "RejectLimitExceeded", "ShardOptions", "ShardResult",
           "WriteShards"]
