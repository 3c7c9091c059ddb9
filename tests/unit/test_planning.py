"""Unit tests for recordbeam.write.planning: order keys, shard assignment, shard counts, sizes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

from recordbeam.write.planning import (
    DEFAULT_SALT,
    DEFAULT_SHARD_SIZE,
    MAX_SHARDS,
    order_key,
    parse_size,
    shard_count,
    shard_of,
)

KEYS = st.integers(0, 2**64 - 1)


def test_order_key_is_a_64_bit_integer_and_repeatable():
    key = order_key("000000000009")
    assert isinstance(key, int)
    assert 0 <= key < 2**64
    assert order_key("000000000009") == key
    assert order_key("000000000009", DEFAULT_SALT) == key


def test_order_key_is_the_same_in_another_process():
    # Python salts str hashes per process; the key must not depend on that.
    code = "from recordbeam.write.planning import order_key; print(order_key('image-42'))"
    env = {"PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert int(out.stdout) == order_key("image-42")


def test_order_key_depends_on_identity_and_salt():
    identities = [str(i) for i in range(200)]
    keys = [order_key(i) for i in identities]
    assert len(set(keys)) == len(keys)
    salted = [order_key(i, "another salt") for i in identities]
    assert all(a != b for a, b in zip(keys, salted, strict=True))
    # A different salt gives a different order, not just different numbers.
    order = sorted(identities, key=order_key)
    assert order != sorted(identities, key=lambda i: order_key(i, "another salt"))


def test_order_key_does_not_follow_the_identity_order():
    identities = [f"{i:012d}" for i in range(100)]
    assert sorted(identities, key=order_key) != identities


def test_order_key_accepts_unicode_identities():
    assert order_key("photo-é.jpg") != order_key("photo-e.jpg")


@settings(max_examples=examples(200), deadline=None)
@given(key=KEYS, n=st.integers(1, MAX_SHARDS))
def test_shard_of_is_within_range(key, n):
    assert 0 <= shard_of(key, n) < n


@settings(max_examples=examples(200), deadline=None)
@given(a=KEYS, b=KEYS, n=st.integers(1, 1000))
def test_shard_of_is_monotonic_so_shards_are_contiguous_key_ranges(a, b, n):
    low, high = sorted((a, b))
    assert shard_of(low, n) <= shard_of(high, n)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000, MAX_SHARDS])
def test_shard_of_reaches_first_and_last_shard(n):
    assert shard_of(0, n) == 0
    assert shard_of(2**64 - 1, n) == n - 1


def test_shard_of_splits_the_key_space_evenly():
    n = 4
    boundaries = [shard_of(i * 2**62, n) for i in range(4)]
    assert boundaries == [0, 1, 2, 3]
    assert shard_of(2**62 - 1, n) == 0


def test_shard_of_spreads_hashed_keys_over_all_shards():
    n = 8
    counts = [0] * n
    for i in range(4000):
        counts[shard_of(order_key(str(i)), n)] += 1
    # 500 expected per shard; a hash this uneven would mean broken keys.
    assert min(counts) > 400
    assert max(counts) < 600


def test_shard_count_uses_num_shards_when_given():
    assert shard_count(10**12, num_shards=3, shard_size=1) == 3
    assert shard_count(0, num_shards=5, shard_size=DEFAULT_SHARD_SIZE) == 5


@pytest.mark.parametrize(
    ("total", "size", "expected"),
    [
        (0, 100, 1),
        (1, 100, 1),
        (100, 100, 1),
        (101, 100, 2),
        (1000, 100, 10),
        (1001, 100, 11),
        (10**15, 1, MAX_SHARDS),
    ],
)
def test_shard_count_from_total_bytes(total, size, expected):
    assert shard_count(total, num_shards=None, shard_size=size) == expected


@pytest.mark.parametrize("bad", [0, -1, MAX_SHARDS + 1])
def test_shard_count_refuses_out_of_range_num_shards(bad):
    with pytest.raises(ValueError, match="--shards"):
        shard_count(100, num_shards=bad, shard_size=DEFAULT_SHARD_SIZE)


@pytest.mark.parametrize("bad", [0, -5])
def test_shard_count_refuses_non_positive_shard_size(bad):
    with pytest.raises(ValueError, match="--shard-size"):
        shard_count(100, num_shards=None, shard_size=bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1048576),
        ("12B", 12),
        ("128MiB", 128 * 2**20),
        ("128mib", 128 * 2**20),
        ("200MB", 200 * 10**6),
        ("1.5GiB", 3 * 2**29),
        ("2GB", 2 * 10**9),
        ("64KiB", 64 * 1024),
        ("64KB", 64_000),
        ("3K", 3 * 1024),
        ("3M", 3 * 2**20),
        ("1G", 2**30),
        (" 256 MiB ", 256 * 2**20),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "MiB", "MB"])
def test_parse_size_refuses_a_missing_number(bad):
    with pytest.raises(ValueError) as caught:
        parse_size(bad)
    assert repr(bad) in str(caught.value)


@pytest.mark.parametrize(
    "bad", ["12 parsecs", "1TB", "abc", "1.2.3MB", "0x10", "inf", "nan", "-5MB"]
)
def test_parse_size_refuses_unreadable_text_with_a_message_for_users(bad):
    # The CLI passes --shard-size / --max-image-bytes here: the error must quote the
    # option's text and say what is accepted, not leak float()'s message (or an
    # OverflowError for "inf"), and a size is never negative.
    with pytest.raises(ValueError) as caught:
        parse_size(bad)
    assert repr(bad) in str(caught.value)
    assert "MiB" in str(caught.value)
