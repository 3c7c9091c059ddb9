"""What a Beam pipeline of your own imports to write shards with recordbeam's guarantees.

The sink is defined in :mod:`recordbeam.write.sink`, its encoder protocol in
:mod:`recordbeam.write.encoder` and its commit in :mod:`recordbeam.write.commit`; those
modules are private, these names are the public ones.
"""

from recordbeam.write.commit import RejectLimitExceeded, ShardResult
from recordbeam.write.encoder import Encoded, ExampleEncoder
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

__all__ = ["Encoded", "ExampleEncoder", "RejectLimitExceeded", "ShardOptions", "ShardResult",
           "WriteShards"]
