"""Node KV as a cache under a byte cap: what the engine keeps, and what it may drop; and
prompts' KV by token ids (PromptCache), for the searches to come.

A KVTree's segments live here, keyed weakly by Node: a tree nobody holds any more takes its
KV with it (trees are reference cycles, so at the next garbage collection). Beyond that,
nothing is freed by hand:

- A call in flight *pins* the paths it reads (`pinned`); a pinned segment is never dropped.
- While the store holds more than `cap` bytes, it drops the least recently used segments
  nothing pins, leaves of the cached forest first (a child's KV is read after its
  ancestors', so the cached nodes of a tree always form a prefix-closed subtree), down to
  7/8 of the cap (one pass of work for many puts).
- A dropped node is *gone*: the store remembers how much of it was cached (its token count
  and whether its output was known), and the KV tree recomputes exactly that when a call
  needs the node again, charged to nobody: a search's Result, its usage included, is the
  same whatever the cap.
- When a search ends (search.session.KVScope.close), its trees' segments leave the store
  and nothing of them is remembered: a finished tree's node KV serves no other search (it
  is keyed by node), and its prompt stays in the prompt cache (PromptCache, below) for the
  next search on it.

So the store holds at most the cap plus what the calls in flight pin (their paths and the
children they are writing).
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from search.runtime.kvpool import (
    BLOCK,  # (tokens a prompt's prefix is matched by)
    Segment,
)
from search.types import Node

DEFAULT_CAP = 4 << 30  # bytes: the searches of a CPU or a single GPU seldom reach it


@dataclass(frozen=True)
class Gone:
    """What was cached of a dropped node: its first n own tokens, and whether its output
    after them (Segment.logits: the node was complete) was known."""

    n: int
    complete: bool


def nbytes(seg: Segment) -> int:
    """Memory a segment holds (Segment.nbytes). An empty step's segment (n=0) stands where
    its parent's does and holds nothing of its own."""
    return seg.nbytes if seg.n else 0


class NodeStore:
    """Segments by node, least recently used dropped first under `cap` bytes (module doc)."""

    def __init__(self, cap: int = DEFAULT_CAP,
                 on_drop: Callable[[Node], None] | None = None) -> None:
        if not isinstance(cap, int) or cap < 0:
            raise ValueError(f"the KV cache cap must be an int >= 0 (bytes), got {cap!r}")
        self.cap = cap
        self.on_drop = on_drop  # told of every node whose segment leaves (prompt cache release)
        # least recently used first: a use moves a node's entry to the end (pop, insert)
        self._segs: weakref.WeakKeyDictionary[Node, Segment] = weakref.WeakKeyDictionary()
        self._pins: Counter[int] = Counter()  # node id -> calls in flight reading it
        self._gone: weakref.WeakKeyDictionary[Node, Gone] = weakref.WeakKeyDictionary()
        # bytes held: exact after each drop pass, else an upper bound (a collected node's
        # segment leaves without telling the store)
        self._bytes = 0
        self.peak = 0  # the most `_bytes` has been after a put (and its drop pass)
        self.dropped = 0  # segments dropped for room (not those of ended searches)
        self._lock = threading.RLock()

    def get(self, node: Node) -> Segment | None:
        with self._lock:  # (not while a use moves the node's entry)
            return self._segs.get(node)

    def gone(self, node: Node) -> Gone | None:
        """What was cached of `node` before the store dropped it for room, None if it was not."""
        return self._gone.get(node)

    def put(self, node: Node, seg: Segment) -> None:
        with self._lock:
            old = self._segs.pop(node, None)
            self._bytes += nbytes(seg) - (nbytes(old) if old is not None else 0)
            self._segs[node] = seg
            self._gone.pop(node, None)
            if self._bytes > self.cap:
                self._make_room()
            self.peak = max(self.peak, self._bytes)

    def items(self) -> list[tuple[Node, Segment]]:
        with self._lock:
            return list(self._segs.items())

    @property
    def held_bytes(self) -> int:
        """Bytes the segments held now take (nbytes of each)."""
        return sum(nbytes(seg) for _, seg in self.items())

    @contextmanager
    def pinned(self, nodes: Sequence[Node]) -> Iterator[None]:
        """Keep the paths to `nodes` for the block (a call reading them), most recently used."""
        path = {a.id: a for node in nodes for a in node.path()}
        ids = list(path)
        with self._lock:
            self._pins.update(ids)
            for a in path.values():
                if (seg := self._segs.pop(a, None)) is not None:
                    self._segs[a] = seg
        try:
            yield
        finally:
            with self._lock:
                self._pins.subtract(ids)
                for i in ids:
                    if self._pins[i] <= 0:
                        del self._pins[i]

    def release(self, nodes: Sequence[Node]) -> None:
        """Drop these nodes' segments and forget them (an ended search's trees)."""
        with self._lock:
            for node in nodes:
                self._gone.pop(node, None)
                seg = self._segs.pop(node, None)
                if seg is not None:
                    self._bytes -= nbytes(seg)
                    if self.on_drop is not None:
                        self.on_drop(node)

    def _make_room(self) -> None:
        """Drop unpinned segments, cached leaves first, least recently used first, until the
        rest fit 7/8 of the cap (or nothing more may go)."""
        live = {node.id: (node, seg) for node, seg in self._segs.items()}
        self._bytes = sum(nbytes(seg) for _, seg in live.values())
        target = self.cap - self.cap // 8
        if self._bytes <= target:
            return
        kids = Counter(node.parent.id for node, _ in live.values()
                       if node.parent is not None and node.parent.id in live)
        rank = {i: r for r, i in enumerate(live)}  # 0: least recently used
        heap = [(rank[i], i) for i in live if not kids[i] and i not in self._pins]
        heapq.heapify(heap)
        while heap and self._bytes > target:
            _, i = heapq.heappop(heap)
            node, seg = live[i]
            del self._segs[node]
            self._gone[node] = Gone(seg.n, seg.logits is not None)
            self._bytes -= nbytes(seg)
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop(node)
            parent = node.parent
            if parent is not None and parent.id in live:
                kids[parent.id] -= 1
                if not kids[parent.id] and parent.id not in self._pins:
                    heapq.heappush(heap, (rank[parent.id], parent.id))


def chain(ids: Sequence[int]) -> list[int]:
    """The hashes of ids' whole BLOCK-token prefixes, shortest first: each block's hash
    chained on the one before it (the prefix's whole history in one int)."""
    out, h = [], 0
    for i in range(BLOCK, len(ids) + 1, BLOCK):
        h = hash((h, tuple(ids[i - BLOCK:i])))
        out.append(h)
    return out


class PromptCache:
    """Prompts' complete segments by token ids, shared by every search on one KV tree (other
    seeds, searches, requests): a prompt whose segment is here is never prefilled again, and
    a prompt that begins as one here does, a whole block at least (`longest`), computes only
    what follows what they share.
    An entry some live root holds costs nothing extra; the entries no root holds are kept,
    least recently used first out, while their bytes stay under `cap` (0: none kept)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        # token ids -> (segment, the live roots holding it), least recently used first
        self._entries: dict[tuple[int, ...], tuple[Segment, weakref.WeakSet[Node]]] = {}
        self._blocks: dict[int, dict[tuple[int, ...], None]] = {}  # chain hash -> entries
        self.hits = 0
        self._lock = threading.Lock()  # (the scheduler's lanes run jobs in several threads)
        self._claims: dict[tuple[int, ...], threading.Event] = {}  # prompts being computed

    def get(self, root: Node, ids: Sequence[int], hidden: bool) -> Segment | None:
        """The prompt's segment for `root` (now one of its holders), None if not here."""
        with self._lock:
            entry = self._used(tuple(ids))
            if entry is None or (hidden and entry[0].hidden is None):
                return None
            entry[1].add(root)
            self.hits += 1
            return entry[0]

    def longest(self, ids: Sequence[int]) -> tuple[Segment, int] | None:
        """(an entry's segment, m): the entry that begins with the most whole blocks of ids
        (the tokens compared, not only hashed), and m the tokens the two share from the
        start, short of ids' last (whose logits are to be computed); None where no entry
        shares a whole first block with ids."""
        hashes = chain(ids[:-1])
        with self._lock:
            for k in range(len(hashes), 0, -1):
                m = k * BLOCK
                for key in self._blocks.get(hashes[k - 1], ()):
                    if key[:m] == tuple(ids[:m]):
                        while m < min(len(key), len(ids) - 1) and key[m] == ids[m]:
                            m += 1
                        self._used(key)  # (most recently used now)
                        return self._entries[key][0], m
        return None

    def _used(self, key: tuple[int, ...]) -> tuple[Segment, weakref.WeakSet[Node]] | None:
        """The entry of `key`, now the most recently used (last); None if not here (under
        _lock)."""
        if (entry := self._entries.pop(key, None)) is not None:
            self._entries[key] = entry
        return entry

    @contextmanager
    def claim(self, prompts: Sequence[tuple[int, ...]]) -> Iterator[list[tuple[int, ...]]]:
        """The prompts no other thread claims now, claimed for the block (its caller
        computes them); on leaving, they are released, then the others are waited for (their
        claimers' computing done: cached, or left to the searches to meet). Threads that
        prefill one prompt at once so compute it once."""
        with self._lock:
            mine = [p for p in prompts if p not in self._claims]
            theirs = [self._claims[p] for p in prompts if p in self._claims]
            self._claims.update((p, threading.Event()) for p in mine)
        try:
            yield mine
        finally:
            with self._lock:
                for p in mine:
                    self._claims.pop(p).set()
        for done in theirs:  # (after releasing: claimers waiting on each other both go on)
            done.wait()

    def add(self, root: Node, ids: Sequence[int], seg: Segment) -> None:
        key = tuple(ids)
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (seg, weakref.WeakSet([root]))
            for h in chain(key):
                self._blocks.setdefault(h, {})[key] = None
        self.evict()

    def release(self, root: Node, ids: Sequence[int]) -> None:
        """`root` holds the prompt's entry no more (its node KV was dropped): the entry is
        kept, if it fits, as one no live root holds."""
        with self._lock:
            entry = self._entries.get(tuple(ids))
            if entry is not None:
                entry[1].discard(root)
        self.evict()

    def evict(self) -> None:
        """Drop least recently used entries no live root holds until the rest fit the cap."""
        with self._lock:
            free = [k for k, (_, holders) in self._entries.items() if not holders]
            held = sum(self._entries[k][0].nbytes for k in free)
            for k in free:
                if held <= self.cap:
                    break
                held -= self._entries.pop(k)[0].nbytes
                for h in chain(k):
                    del (keys := self._blocks[h])[k]
                    if not keys:
                        del self._blocks[h]

    @property
    def unheld_bytes(self) -> int:
        return sum(seg.nbytes for seg, holders in self._entries.values() if not holders)

    def __len__(self) -> int:
        return len(self._entries)
