"""The Beam-free core of duplicate finding: the hash-file codec, exact groups and their
lines, the merge of a run's groups with a folder's previous ones, which copies a drop
keeps, near-duplicate pairs through LSH keys and their components, and the finder that
``check`` and ``report`` feed record by record."""

from __future__ import annotations

import hashlib
import io
import json
import random

import numpy as np
import pytest
from photos import photo_like_pixels
from PIL import Image

from recordbeam.dataset.duplicate_groups import (
    MAX_LISTED_MEMBERS,
    Copy,
    DuplicateCounts,
    Group,
    Member,
    copies_to_drop,
    copies_to_name,
    exact_groups,
    group_of,
    merge_group_lines,
    split_rank,
)
from recordbeam.dataset.duplicate_rules import duplicate_rules
from recordbeam.dataset.find_duplicates import DuplicateFinder, RecordPlace
from recordbeam.dataset.image_hashes import (
    DamagedHashFile,
    HashEntry,
    HashFile,
    HashTable,
    decode_hash_file,
    digest_bucket,
    encode_hash_file,
    repeated_rows,
    split_by_bucket,
)
from recordbeam.dataset.near_groups import (
    NearImage,
    NearPair,
    image_keys,
    images_in_bucket,
    key_bucket,
    near_components,
    near_pairs,
)
from recordbeam.images.perceptual_hash import PerceptualHash, perceptual_hash


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


# ---------------------------------------------------------------- the hash file


def test_a_hash_file_round_trips_with_its_entries_sorted():
    near = PerceptualHash(1, (2, 3, 4, 5)).to_bytes()
    entries = (HashEntry(_sha("b"), 1, "images/b.jpg", near),
               HashEntry(_sha("a"), 0, "gs://bucket/ä.jpg"),
               HashEntry(_sha("c"), -1, "c.jpg", dropped=True))
    data = encode_hash_file(HashFile("train", "train-00000-of-00002.tfrecord", entries, True))
    decoded = decode_hash_file(data)
    assert (decoded.split, decoded.shard, decoded.near_computed) == (
        "train", "train-00000-of-00002.tfrecord", True)
    assert list(decoded.entries) == sorted(entries, key=lambda e: e.digest)
    # The same entries in another order give the same bytes.
    again = HashFile("train", "train-00000-of-00002.tfrecord", entries[::-1], True)
    assert encode_hash_file(again) == data


@pytest.mark.parametrize("cut", [0, 5, 20, -1])
def test_a_damaged_hash_file_is_refused_naming_it(cut):
    data = encode_hash_file(HashFile("val", "v.tfrecord", (HashEntry(_sha("a"), 0, "a.jpg"),)))
    damaged = data[:cut] if cut >= 0 else data + b"x"
    with pytest.raises(DamagedHashFile, match="hashes/val.hashes"):
        decode_hash_file(damaged, "hashes/val.hashes")


def test_buckets_are_contiguous_digest_ranges():
    digests = sorted(_sha(str(i)) for i in range(2000))
    buckets = [digest_bucket(d, 7) for d in digests]
    assert buckets == sorted(buckets)
    assert set(buckets) == set(range(7))
    hashes = HashFile("train", "s", tuple(HashEntry(d, i, f"{i}") for i, d in enumerate(digests)))
    parts = list(split_by_bucket(HashTable(encode_hash_file(hashes)), 7))
    assert [b for b, _ in parts] == list(range(7))
    decoded = [decode_hash_file(part) for _, part in parts]
    assert sum(len(part.entries) for part in decoded) == 2000
    # Cut out column by column: the bytes the encoder gives for those entries.
    for (bucket, part), entries in zip(parts, decoded, strict=True):
        assert part == encode_hash_file(HashFile("train", "s", entries.entries))
        assert {digest_bucket(e.digest, 7) for e in entries.entries} == {bucket}
    whole = HashTable(encode_hash_file(hashes))
    assert list(split_by_bucket(whole, 1)) == [(0, whole.data)]


def test_buckets_are_sized_by_bytes_or_by_images_whichever_makes_more():
    from recordbeam.write.duplicates import (
        BUCKET_BYTES,
        BUCKET_IMAGES,
        MAX_BUCKETS,
        EarlierSplits,
        bucket_count,
    )

    assert bucket_count(0, 0) == 1
    # Photos: the bytes decide (3 buckets of 512 MiB; 10,000 images fit in one by count).
    assert bucket_count(2 * BUCKET_BYTES + 1, 0, 10_000) == 3
    # Small files: 1M images of 5.5 KB are 11 buckets by bytes, 62 by images.
    assert bucket_count(5_500 * 10**6, 0, 10**6) == -(-10**6 // BUCKET_IMAGES) == 62
    # What the folder keeps counts too, and the count stays within its bounds.
    earlier = EarlierSplits(bytes=BUCKET_BYTES, images=3 * BUCKET_IMAGES)
    assert earlier.buckets({"train": (1, BUCKET_IMAGES)}) == 4
    assert earlier.buckets({"train": (1, 10**12)}) == MAX_BUCKETS


# ---------------------------------------------------------------- exact groups


def test_groups_hold_every_copy_across_files_and_nothing_single():
    train = HashFile("train", "train-0.tfrecord", (
        HashEntry(_sha("cat"), 0, "a/cat.jpg"), HashEntry(_sha("cat"), 5, "b/cat-copy.jpg"),
        HashEntry(_sha("dog"), 1, "dog.jpg")))
    val = HashFile("val", "val-0.tfrecord", (HashEntry(_sha("cat"), 2, "val/cat.jpg"),
                                             HashEntry(_sha("owl"), 0, "owl.jpg")))
    groups = exact_groups([val, train])
    assert len(groups) == 1
    (cat,) = groups
    assert cat.digest == _sha("cat").hex()
    assert cat.size == 3 and cat.splits == ("train", "val") and cat.across_splits
    assert [(m.split, m.source, m.record) for m in cat.members] == [
        ("train", "a/cat.jpg", 0), ("train", "b/cat-copy.jpg", 5), ("val", "val/cat.jpg", 2)]


def test_a_group_line_round_trips_and_names_dropped_copies():
    group = exact_groups([
        HashFile("train", "t.tfrecord", (HashEntry(_sha("x"), 3, "x.jpg"),)),
        HashFile("val", "", (HashEntry(_sha("x"), -1, "val/x.jpg", dropped=True),)),
    ])[0]
    line = json.loads(group.to_line())
    assert line == {"sha256": _sha("x").hex(), "size": 2, "splits": ["train", "val"],
                    "members": [{"split": "train", "source": "x.jpg", "shard": "t.tfrecord",
                                 "record": 3},
                                {"split": "val", "source": "val/x.jpg", "dropped": True}]}
    assert Group.from_line(group.to_line()) == group


def test_splits_order_train_first_test_last():
    names = ["test", "val", "train", "minival", "test_dev", "train_extra", "dev"]
    assert sorted(names, key=split_rank) == [
        "train", "train_extra", "dev", "minival", "val", "test", "test_dev"]


def test_a_huge_group_lists_some_copies_and_counts_all_with_every_split_shown():
    entries = tuple(HashEntry(_sha("placeholder"), i, f"img{i:05d}.jpg") for i in range(500))
    group = exact_groups([HashFile("train", "t", entries),
                          HashFile("val", "v", (HashEntry(_sha("placeholder"), 0, "v.jpg"),))])[0]
    assert group.size == 501
    assert len(group.members) == MAX_LISTED_MEMBERS
    assert group.splits == ("train", "val")
    assert any(m.split == "val" for m in group.members)


def _group_by_definition(digest, members):
    # group_of's rule with every copy held: the first copy of each split, then the others
    # in order, up to MAX_LISTED_MEMBERS; each copy counted once.
    ordered = sorted(set(members), key=Member.order)
    listed = ordered
    if len(ordered) > MAX_LISTED_MEMBERS:
        firsts = {}
        for member in ordered:
            firsts.setdefault(member.split, member)
        chosen = set(list(firsts.values())[:MAX_LISTED_MEMBERS])
        for member in ordered:
            if len(chosen) >= MAX_LISTED_MEMBERS:
                break
            chosen.add(member)
        listed = sorted(chosen, key=Member.order)
    return Group(digest, tuple(listed), len(ordered),
                 tuple(sorted({m.split for m in ordered}, key=split_rank)))


@pytest.mark.parametrize("copies", [3, 99, 100, 101, 250, 1200])
@pytest.mark.parametrize("seed", range(4))
def test_a_group_made_in_one_pass_is_the_group_its_rule_defines(copies, seed):
    rng = random.Random(seed * 7919 + copies)
    splits = ["train", "val", "test", "extra"][:rng.randint(1, 4)]
    members = []
    for i in range(copies):
        split = rng.choice(splits)
        if rng.random() < 0.1:
            members.append(Member(split, f"d{rng.randrange(copies)}.jpg", dropped=True))
        else:
            members.append(Member(split, f"s{i}.jpg", f"{split}-{rng.randrange(9)}",
                                  rng.randrange(copies)))
    members += rng.sample(members, copies // 5)  # copies given twice
    rng.shuffle(members)
    made = group_of("d", iter(members))
    assert made == _group_by_definition("d", members)
    assert group_of("d", reversed(members)) == made


def test_repeated_rows_are_every_digest_found_twice_with_its_indexes():
    rng = random.Random(5)
    pool = [_sha(str(i)) for i in range(50)]
    # digests sharing their first 8 bytes but not the rest
    pool += [pool[0][:8] + _sha(f"tail{i}")[8:] for i in range(5)]
    picks = [rng.choice(pool) for _ in range(400)]
    expected = {}
    for index, digest in enumerate(picks):
        expected.setdefault(digest, []).append(index)
    found = repeated_rows(b"".join(picks))
    assert {d: list(i) for d, i in found.items()} == {
        d: i for d, i in expected.items() if len(i) > 1}
    assert repeated_rows(b"".join(pool)) == {}


def _line(digest: str, *members: Member) -> str:
    return Group(digest, tuple(members), len(members),
                 tuple(sorted({m.split for m in members}, key=split_rank))).to_line()


def test_the_merge_keeps_other_splits_copies_and_replaces_the_runs_own():
    owned = {"val"}
    previous = [
        # train-only group: kept as it is
        _line("aa", Member("train", "t1", "s", 1), Member("train", "t2", "s", 2)),
        # train + old val: the old val copy goes; the new run's line has the train copy
        _line("bb", Member("train", "t3", "s", 3), Member("val", "old-val", "v", 0)),
        # train + a copy dropped by the train run: the new run found only one train copy
        _line("cc", Member("train", "t4", "s", 4), Member("train", "t4b", dropped=True)),
        # old val only: gone
        _line("dd", Member("val", "v1", "v", 1), Member("val", "v2", "v", 2)),
    ]
    new = [
        _line("bb", Member("train", "t3", "s", 3), Member("val", "new-val", "v", 7)),
        _line("ee", Member("val", "n1", "v", 1), Member("val", "n2", "v", 2)),
    ]
    merged = [Group.from_line(line) for line in merge_group_lines(new, previous, owned)]
    assert [g.digest for g in merged] == ["aa", "bb", "cc", "ee"]
    assert [m.source for m in merged[1].members] == ["t3", "new-val"]
    assert [m.source for m in merged[2].members] == ["t4", "t4b"]
    assert [g.size for g in merged] == [2, 2, 2, 2]


def test_counts_say_groups_images_copies_and_splits():
    counts = DuplicateCounts()
    for line in [_line("aa", Member("train", "a", "s", 1), Member("train", "b", "s", 2)),
                 _line("bb", Member("train", "c", "s", 3), Member("val", "d", dropped=True),
                       Member("test", "e", "t", 0))]:
        counts.add(Group.from_line(line))
    assert counts.to_json() == {"groups": 2, "images": 5, "extra_copies": 3,
                                "across_splits": 1, "dropped": 1}
    assert [g.digest for g in counts.first_across] == ["bb"]


# ---------------------------------------------------------------- which copy a drop keeps


def _copies(*spec: tuple[str, int] | tuple[str, int, bool]) -> list[Copy]:
    return [Copy(s[0], s[1], f"src{i}", *(s[2:])) for i, s in enumerate(spec)]


def test_keep_drops_nothing():
    assert copies_to_drop("keep", _copies(("train", 1), ("train", 2))) == set()


def test_drop_keeps_the_smallest_hash_of_the_earliest_split():
    copies = _copies(("val", 1), ("train", 9), ("train", 5), ("test", 0))
    assert copies_to_drop("drop", copies) == {0, 1, 3}


def test_drop_across_splits_keeps_every_copy_of_the_first_split():
    copies = _copies(("val", 1), ("train", 9), ("train", 5), ("test", 0), ("val", 3))
    assert copies_to_drop("drop-across-splits", copies) == {0, 3, 4}


def test_a_split_written_earlier_keeps_its_copy_and_this_runs_are_dropped():
    copies = _copies(("val", 1), ("train", 9, True), ("val", 0))
    assert copies_to_drop("drop", copies) == {0, 2}
    assert copies_to_drop("drop-across-splits", copies) == {0, 2}
    # Even when the earlier split sorts after this run's (a train run after a val run).
    copies = _copies(("train", 1), ("val", 9, True))
    assert copies_to_drop("drop-across-splits", copies) == {0}


def test_the_choice_does_not_depend_on_the_order_copies_arrive_in():
    copies = _copies(("train", 7), ("train", 3), ("val", 1), ("train", 3))
    for _ in range(10):
        order = list(range(len(copies)))
        random.shuffle(order)
        shuffled = [copies[i] for i in order]
        kept = set(range(len(copies))) - copies_to_drop("drop", shuffled)
        assert {shuffled[i].source for i in kept} == {"src1"}


# ---------------------------------------------------------------- near duplicates


@pytest.fixture(scope="module")
def near_images() -> list[NearImage]:
    """Four photos, a re-encoded copy of the first, a cropped copy of the second, and an
    exact copy of the third (same digest) in another split."""
    photos = [photo_like_pixels(320, 240, seed=50 + i) for i in range(4)]
    datas = [_jpeg(p) for p in photos]
    datas += [_jpeg(photos[0], quality=55), _jpeg(photos[1][:-10, 12:])]
    images = [NearImage(hashlib.sha256(d).digest(), perceptual_hash(d),
                        Member("train", f"img{i}.jpg", "t", i)) for i, d in enumerate(datas)]
    images.append(NearImage(images[2].digest, images[2].hash, Member("val", "copy.jpg", "v", 0)))
    return images


def test_near_pairs_are_the_copies_once_each(near_images):
    pairs = near_pairs(near_images).pairs
    found = {(p.first, p.second) for p in pairs}
    digests = [i.digest for i in near_images]
    expected = {tuple(sorted((digests[0], digests[4]))), tuple(sorted((digests[1], digests[5])))}
    assert found == expected
    assert len(pairs) == 2


def test_the_buckets_together_find_what_one_pass_finds(near_images):
    buckets = 5
    together = []
    for bucket in range(buckets):
        mine = list(images_in_bucket(near_images, bucket, buckets))
        together += near_pairs(mine, bucket=bucket, buckets=buckets).pairs
    assert sorted(set(together)) == near_pairs(near_images).pairs


def test_keys_ask_under_every_hash_and_index_the_frame():
    value = PerceptualHash(0x0001_0002_0003_0004, (0x0005_0000_0000_0000, 0, 0, 0))
    indexed, asks = image_keys(value)
    assert len(indexed) == 4 and indexed <= asks
    # The frame's 4 bands, the first window's 4 (three of them zero), and the zero
    # windows' one band not seen yet: (0, 0).
    assert len(asks) == 4 + 4 + 1
    assert all(0 <= key_bucket(k, 13) < 13 for k in asks)


def test_components_join_chains_and_give_standing_copies(near_images):
    a, b, c, d = (bytes([i]) * 32 for i in range(4))
    members = {x: Member("train", f"{i}.jpg", "t", i) for i, x in enumerate((a, b, c, d))}
    members[d] = Member("val", "3.jpg", "v", 0)
    pairs = [NearPair(a, b, 2), NearPair(b, c, 5), NearPair(a, b, 2)]
    result = near_components(pairs, members)
    assert result.pairs == 2 and result.pairs_not_grouped == 0
    (group,) = result.groups
    assert [m.source for _, m in group.members] == ["0.jpg", "1.jpg", "2.jpg"]
    assert group.size == 3 and group.max_distance == 5 and not group.across_splits
    assert json.loads(group.to_line())["members"][0]["sha256"] == a.hex()


def test_pairs_past_the_bound_are_counted_not_grouped():
    digests = [bytes([i]) * 32 for i in range(6)]
    members = {x: Member("train", str(i), "t", i) for i, x in enumerate(digests)}
    pairs = [NearPair(digests[i], digests[i + 1], 1) for i in range(5)]
    result = near_components(pairs, members, max_pairs=2)
    assert result.pairs == 5 and result.pairs_not_grouped == 3
    assert [g.size for g in result.groups] == [3]


def test_a_key_shared_by_thousands_is_searched_through_leaders():
    """3000 different files with one perceptual hash (a placeholder picture re-encoded):
    every key holds all of them, so each is linked to a leader instead of the 4.5 million
    pairs being compared."""
    value = 0x0F0F_0F0F_0F0F_0F0F
    images = [NearImage(hashlib.sha256(i.to_bytes(4, "big")).digest(),
                        PerceptualHash(value, (value,) * 4), Member("train", str(i), "t", i))
              for i in range(3000)]
    found = near_pairs(images)
    assert len(found.pairs) == 2999 and found.beyond == 0
    first = min(i.digest for i in images)
    assert all(first in (p.first, p.second) for p in found.pairs)
    components = near_components(found.pairs, {i.digest: i.member for i in images})
    assert [g.size for g in components.groups] == [3000]
    assert len(components.groups[0].members) == 100


def test_leaders_link_images_that_only_ask_under_a_crowded_key():
    """A crowded key (600 images indexed, 1200 asking: the leader search) whose askers are
    near one another without sharing a key where one is indexed: each such pair is
    recorded once, under the smallest key both ask under."""
    key_band = 0x1234
    images = []
    for i in range(600):  # indexed under (band 0, key_band), far from everything else
        frame = key_band << 48 | int.from_bytes(hashlib.sha256(b"i%d" % i).digest()[:6], "big")
        images.append(NearImage(hashlib.sha256(b"indexed %d" % i).digest(),
                                PerceptualHash(frame, (frame ^ 0xFFFF,) * 4),
                                Member("train", f"i{i}", "t", i)))
    base, one_bit_a_band = 0x0F0F_5555_AAAA_3333, 0x0001_0001_0001_0001
    for j in range(600):  # two frames 4 bits apart, one in each band: no band shared
        frame = base ^ (one_bit_a_band if j % 2 else 0)
        window = key_band << 48 | (frame & 0xFFFF_FFFF_FFFF)
        images.append(NearImage(hashlib.sha256(b"asker %d" % j).digest(),
                                PerceptualHash(frame, (window,) * 4),
                                Member("val", f"a{j}", "v", j)))
    found = near_pairs(images)
    askers = {i.digest for i in images if i.member.split == "val"}
    linked = [p for p in found.pairs if p.first in askers and p.second in askers]
    assert linked and found.beyond == 0
    assert len({(p.first, p.second) for p in found.pairs}) == len(found.pairs)
    components = near_components(found.pairs, {i.digest: i.member for i in images})
    assert any(g.size == 600 for g in components.groups)  # both frames: one group


def test_pairs_found_past_the_bound_are_let_go_and_counted(monkeypatch):
    from recordbeam.dataset import near_groups

    monkeypatch.setattr(near_groups, "MAX_NEAR_PAIRS", 5)
    value = 0x0F0F_0F0F_0F0F_0F0F
    images = [NearImage(bytes([i]) * 32, PerceptualHash(value, (value,) * 4),
                        Member("train", str(i), "t", i)) for i in range(8)]
    found = near_pairs(images)  # 8 x 7 / 2 = 28 pairs, all compared (a small key)
    assert len(found.pairs) == 5 and found.beyond == 23
    assert found.pairs == sorted(found.pairs)
    result = near_components(found.pairs, {i.digest: i.member for i in images},
                             beyond=found.beyond)
    assert result.pairs == 28 and result.pairs_not_grouped == 23


# ---------------------------------------------------------------- the record-by-record finder


def test_the_finder_groups_records_by_their_images():
    finder = DuplicateFinder()
    cat, dog = b"cat-bytes", b"dog-bytes"
    finder.add(RecordPlace("train", "train-0", 0), cat)
    finder.add(RecordPlace("train", "train-0", 1), dog, hashlib.sha256(dog).hexdigest())
    finder.add(RecordPlace("val", "val-0", 0), cat, hashlib.sha256(cat).hexdigest().encode())
    finder.add(RecordPlace("val", "val-0", 1), b"owl-bytes", "not a sha")
    (group,) = finder.exact_groups()
    assert group.digest == hashlib.sha256(cat).hexdigest()
    assert [(m.split, m.shard, m.record) for m in group.members] == [
        ("train", "train-0", 0), ("val", "val-0", 0)]
    assert finder.near_groups().groups == []


def test_the_finder_finds_near_copies_and_counts_what_does_not_decode():
    photo = photo_like_pixels(320, 240, seed=7)
    finder = DuplicateFinder(near=True)
    finder.add(RecordPlace("train", "t", 0), _jpeg(photo))
    finder.add(RecordPlace("train", "t", 1), _jpeg(photo_like_pixels(320, 240, seed=8)))
    finder.add(RecordPlace("val", "v", 0), _jpeg(photo, quality=60))
    finder.add(RecordPlace("val", "v", 1), b"\xff\xd8 broken")
    near = finder.near_groups()
    assert finder.unhashable == 1
    (group,) = near.groups
    assert [(m.split, m.record) for _, m in group.members] == [("train", 0), ("val", 0)]
    assert group.across_splits


def test_a_split_overlap_names_a_copy_in_each_split():
    finder = DuplicateFinder()
    leak = b"leak-bytes"
    for record in range(5):
        finder.add(RecordPlace("train", "train-0", record), leak)
    finder.add(RecordPlace("val", "val-0", 0), leak)
    rules = {rule.name: rule for rule in duplicate_rules(finder, max_shown=5)}
    (overlap,) = rules["split-overlap"].shown
    assert overlap.endswith("train-0 record 0, train-0 record 1, train-0 record 2, "
                            "val-0 record 0, and 2 more")
    (within,) = rules["duplicates"].shown
    assert within.startswith("train: 5 copies") and within.endswith("train-0 record 3, and 1 more")


def test_the_copies_named_include_the_first_of_each_split():
    members = [Member("train", f"t{i}") for i in range(6)] + [Member("val", "v0"),
                                                             Member("val", "v1"),
                                                             Member("test", "x0")]
    assert [m.source for m in copies_to_name(members, 4)] == ["t0", "t1", "v0", "x0"]
    assert [m.source for m in copies_to_name(members, 2)] == ["t0", "v0", "x0"]
    assert [m.source for m in copies_to_name(members[:3], 4)] == ["t0", "t1", "t2"]
