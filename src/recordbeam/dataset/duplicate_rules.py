"""The duplicate rules of ``recordbeam check OUT --duplicates``: what a
:class:`~recordbeam.dataset.find_duplicates.DuplicateFinder` found while the check read
every record, as rules that fail.

- ``duplicates``: no image is written twice in one split (the copy weighs double in
  training, or is counted twice in evaluation);
- ``split-overlap``: no image is in two splits (a model evaluated on an image it was
  trained on scores too high);
- ``near-duplicates`` (with ``--near-duplicates``): no two images are near duplicates
  (re-encoded, resized or slightly cropped copies of one picture).

Each violation names the copies by shard and record, as ``recordbeam inspect`` finds them.
"""

from __future__ import annotations

from collections.abc import Iterable

from recordbeam.dataset.consumers import RuleResult
from recordbeam.dataset.duplicate_groups import Member, copies_to_name, split_rank
from recordbeam.dataset.find_duplicates import DuplicateFinder
from recordbeam.errors import counted
from recordbeam.images.perceptual_hash import NEAR_THRESHOLD

__all__ = ["duplicate_rules"]

#: Copies named per violation; the others are counted.
_SHOWN_COPIES = 4


def _places(members: Iterable[Member]) -> str:
    members = list(members)
    named = copies_to_name(members, _SHOWN_COPIES)
    shown = [f"{m.shard} record {m.record}" for m in named]
    if len(members) > len(named):
        shown.append(f"and {len(members) - len(named)} more")
    return ", ".join(shown)


def duplicate_rules(finder: DuplicateFinder, max_shown: int) -> list[RuleResult]:
    """The rules' results for what ``finder`` holds (``near-duplicates`` only when it
    computed perceptual hashes)."""
    within = RuleResult("duplicates", "no image is written twice in one split", checked=len(finder))
    overlap = RuleResult("split-overlap", "no image is in two splits", checked=len(finder))
    for group in finder.exact_groups():
        by_split: dict[str, list[Member]] = {}
        for member in group.members:
            by_split.setdefault(member.split, []).append(member)
        short = group.digest[:12]
        for split, members in by_split.items():
            if len(members) > 1:
                within.fail(f"{split}: {len(members)} copies of one image (sha256 {short}...): "
                            f"{_places(members)}", max_shown)
        if len(by_split) > 1:
            overlap.fail(f"one image (sha256 {short}...) in {' and '.join(by_split)}: "
                         f"{_places(group.members)}", max_shown)
    rules = [within, overlap]
    if finder.near:
        rules.append(_near_rule(finder, max_shown))
    return rules


def _near_rule(finder: DuplicateFinder, max_shown: int) -> RuleResult:
    rule = RuleResult("near-duplicates", "no two images are near duplicates (perceptual "
                      f"hashes within {NEAR_THRESHOLD} bits)", checked=len(finder) - finder.unhashable)
    found = finder.near_groups()
    for group in found.groups:
        splits = sorted({m.split for _d, m in group.members}, key=split_rank)
        rule.fail(f"{group.size} near-identical images in {' and '.join(splits)}: "
                  f"{_places(m for _d, m in group.members)}", max_shown)
    if finder.unhashable:
        rule.fail(f"{counted(finder.unhashable, 'image')} did not decode whole, so "
                  "could not be compared (a trainer decoding them fails too)", max_shown)
    if found.pairs_not_grouped:
        rule.fail(f"{found.pairs_not_grouped} near-duplicate pairs past the first "
                  f"{found.pairs - found.pairs_not_grouped} were not grouped", max_shown)
    return rule
