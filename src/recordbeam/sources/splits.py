"""Where a key falls when a share of the examples goes to another split.

Class folders (``--val-fraction``) and manifests (``--split train=0.8,...``) decide a
split by the same salted hash, so an image lands in the same split whatever the order
or the machine. The salt is not the shard-order salt: the split does not correlate with
shard positions.
"""

from __future__ import annotations

from recordbeam.write.planning import order_key

#: Salt of the hash that decides splits.
SPLIT_SALT = "recordbeam/split/v1"


def split_share(key: str) -> float:
    """Where ``key`` falls in [0, 1) (a salted hash of it)."""
    return order_key(key, SPLIT_SALT) / 2.0**64
