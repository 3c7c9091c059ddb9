"""Writing shards: the encoder protocol, shard planning, the sink's DoFns and the
commit of a finished output folder."""
