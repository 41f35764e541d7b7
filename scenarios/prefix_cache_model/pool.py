"""The block pool of the model: per-block key and ref count, the free queue, key → holding
blocks (rules 4–7 of :mod:`scenarios.prefix_cache_model`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

#: Key of a full block of generated tokens: hashed (so freed to the free queue's tail) but
#: unique to its request, so never looked up; not entered in the key map.
GENERATED = -1


class BlockPool:
    """The block pool: per-block key and ref count, the free queue, key → holding blocks.

    Written for speed (the whole 3,993-request sample at B = 128 is ~480,000 block
    allocations per capacity): plain lists and dicts, the loops inlined in its methods.
    """

    def __init__(self, capacity_blocks: int | None) -> None:
        self.bounded = capacity_blocks is not None
        n = capacity_blocks or 0
        self.key: list[int | None] = [None] * n
        self.ref: list[int] = [0] * n
        # Free queue, head first (block id → None); eviction pops the head.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(n))
        # Cached key → its first holder; later holders in insertion order (vLLM's
        # BlockHashToBlockMap keeps duplicates and answers a lookup with the first).
        self.first: dict[int, int] = {}
        self.dups: dict[int, list[int]] = {}
        self.lent: set[int] = set()
        # Unbounded pool: freed blocks without a hash, reused before a block is made.
        self.spare: list[int] = []
        # Told the key of every cached block an allocation evicts (None: nobody listens).
        self.on_evict: Callable[[int], None] | None = None

    def uncache(self, bid: int) -> None:
        key = self.key[bid]
        self.key[bid] = None
        if key is None or key == GENERATED:
            return
        if self.first[key] == bid:
            later = self.dups.get(key)
            if later:
                self.first[key] = later.pop(0)
                if not later:
                    del self.dups[key]
            else:
                del self.first[key]
        else:
            later = self.dups[key]
            later.remove(bid)
            if not later:
                del self.dups[key]

    def lookup(self, keys: Sequence[int], limit: int) -> list[int]:
        """Blocks holding the leading cached run of ``keys[:limit]`` (stops at the first miss)."""
        first = self.first
        out: list[int] = []
        for key in keys[:limit]:
            bid = first.get(key)
            if bid is None:
                break
            out.append(bid)
        return out

    def touch(self, blocks: list[int]) -> None:
        ref, free = self.ref, self.free
        for bid in blocks:
            if ref[bid] == 0 and self.bounded:
                del free[bid]
            ref[bid] += 1

    def allocate(self, n: int) -> tuple[list[int], int]:
        """``n`` blocks (ref count 1) from the free queue's head, their keys evicted; the
        missing ones lent (bounded pool) or made (unbounded). Returns (blocks, lent)."""
        taken = min(n, len(self.free)) if self.bounded else 0
        blocks: list[int] = []
        popitem, key, ref, first, dups, on_evict = (
            self.free.popitem,
            self.key,
            self.ref,
            self.first,
            self.dups,
            self.on_evict,
        )
        for _ in range(taken):
            bid = popitem(last=False)[0]
            k = key[bid]
            if k is not None:  # evict (the common case inlined: sole holder of its key)
                if on_evict is not None:
                    on_evict(k)
                if k != GENERATED and first.get(k) == bid and k not in dups:
                    del first[k]
                    key[bid] = None
                else:
                    self.uncache(bid)
            ref[bid] = 1
            blocks.append(bid)
        if not self.bounded:
            reuse = min(n, len(self.spare))
            for _ in range(reuse):
                bid = self.spare.pop()
                ref[bid] = 1
                blocks.append(bid)
            taken = reuse
        made = range(len(self.key), len(self.key) + n - taken)
        self.key.extend([None] * len(made))
        self.ref.extend([1] * len(made))
        blocks.extend(made)
        if self.bounded:
            self.lent.update(made)
            return blocks, len(made)
        return blocks, 0

    def cache(self, blocks: list[int], keys: Sequence[int], start: int, generated: int) -> None:
        """Hash ``blocks[start:len(keys)]`` with their prompt keys, then the next
        ``generated`` blocks as generated-token blocks."""
        key, first, dups = self.key, self.first, self.dups
        for index in range(start, len(keys)):
            bid, k = blocks[index], keys[index]
            key[bid] = k
            if k in first:
                dups.setdefault(k, []).append(bid)
            else:
                first[k] = bid
        for index in range(len(keys), len(keys) + generated):
            key[blocks[index]] = GENERATED

    def free_request(self, blocks: list[int]) -> None:
        """``SingleTypeKVCacheManager.free`` + ``BlockPool.free_blocks``: reverse order; hashed
        blocks to the tail, unhashed ones to the head. In an unbounded pool hashed blocks stay
        cached for good and unhashed ones are kept for reuse; lent blocks leave the model."""
        ref, key, free = self.ref, self.key, self.free
        to_head: list[int] = []
        for bid in reversed(blocks):
            ref[bid] -= 1
            if ref[bid]:
                continue
            if not self.bounded:
                if key[bid] is None:
                    self.spare.append(bid)
                continue
            if self.lent and bid in self.lent:
                self.lent.discard(bid)
                self.uncache(bid)
            elif key[bid] is None:
                to_head.append(bid)
            else:
                free[bid] = None
        for bid in reversed(to_head):  # prepend_n keeps the list's order at the head
            free[bid] = None
            free.move_to_end(bid, last=False)
