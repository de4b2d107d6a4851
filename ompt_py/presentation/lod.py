"""Levels of detail of a timeline, for a view that is one static file.

A trace of 10^7 events has millions of bars: more than a browser draws quickly
and, with what a hover shows, more than a file of a few tens of megabytes
holds as plain arrays.  So the bars are kept in a tree of time spans, each cut
in FANOUT equal children (node ``(depth, index)`` spans ``[index * width,
(index + 1) * width)`` from the window's start, ``width = 2**bits / FANOUT**
depth`` nanoseconds: exact integers, the same in Python and JavaScript):

* a **leaf** is a span that holds at most LEAF_BARS bars: it keeps them
  exactly;
* an **inner** node keeps, per lane, layer and time bin (``bins`` per node),
  the **aggregate** of the bars below it: the kind that covers most of the bin,
  that share of the bin, how many bars touch it and the site of the largest;
  consecutive bins alike are one glyph.  It also keeps exactly its **own**
  bars: those that cross the bounds of its children (few: long ones).

Each bar is kept once: in the deepest node that holds it whole, or in the leaf
above that.  A view of a time range draws, at the depth whose nodes are as wide
as the range or a little wider (so that a bin is one to FANOUT pixels), the
aggregates of the inner nodes in view, the leaves in view and the own bars of
the nodes above: at most ``2 * LEAF_BARS`` exact bars and two aggregates.  The
file holds every bar once and the aggregates of the inner nodes, of which
there are fewer than ``FANOUT / (FANOUT - 1) * bars / LEAF_BARS``: its size
grows with the bars, not with the zoom.

Each leaf, own list and aggregate is a **blob**: its columns, each in the
smallest of uint8, uint16, uint32 or float64 that holds it, times as
differences from the previous bar (or the node's start), deflated (zlib) and
base64-encoded (encode), for the view's JavaScript to inflate when a range
needs it.
"""

from __future__ import annotations

import base64
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .. import _core

#: Children per node.
FANOUT = 4
_FAN_BITS = 2
#: Most bars a leaf keeps (a deeper node is made while a span has more; a node
#: MAX_DEPTH deep is a leaf whatever it holds).
LEAF_BARS = 30_000
#: The aggregate of a node: about this many glyphs at most over all its lanes
#: (``bins`` per lane and layer: AGGREGATE_GLYPHS / lanes, a power of two from
#: MIN_BINS to MAX_BINS).
AGGREGATE_GLYPHS = 16_384
MIN_BINS, MAX_BINS = 64, 1024
MAX_DEPTH = 15
#: Shares of a bin are kept in 1/SHARE_STEPS steps (consecutive bins of one
#: kind, site and step are one glyph).
SHARE_STEPS = 8

#: The columns of a blob of bars (each an array of the bars' values): lane,
#: begin (ns from the node's start, as differences from the previous bar's),
#: duration_ns, kind, site, team, wait_ns + 1 (0: not known), sub, tracks.
BAR_FIELDS = ["lane", "begin", "duration", "kind", "site", "team", "wait", "sub", "tracks"]
#: The columns of a blob of an aggregate: lane, first bin (from the node's start,
#: as differences from the previous glyph's), bins, kind (the one covering most),
#: share (of the glyph's time it covers, 0 to 255), bars (touching it), site (of
#: its largest bar).
AGGREGATE_FIELDS = ["lane", "bin", "bins", "kind", "share", "bars", "site"]


@dataclass
class BarSet:
    """Bars as the tree takes them: each column an array, one row per bar; ``begin``
    and ``end`` in ns from the window's start (0 <= begin <= end < 2**bits)."""

    lane: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    layer: np.ndarray
    site: np.ndarray
    team: np.ndarray
    wait: np.ndarray
    sub: np.ndarray
    tracks: np.ndarray

    def take(self, rows: np.ndarray) -> BarSet:
        return BarSet(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))

    def slice(self, a: int, b: int) -> BarSet:
        """Rows a to b (views)."""
        return BarSet(*(getattr(self, f)[a:b] for f in self.__dataclass_fields__))

    def __len__(self) -> int:
        return len(self.begin)


@dataclass
class Node:
    """A node of the tree: ``bars`` (a leaf's, or an inner node's own) and, for an
    inner node, ``aggregate`` (columns of AGGREGATE_FIELDS, bins absolute)."""

    depth: int
    index: int
    leaf: bool
    bars: BarSet
    aggregate: dict[str, np.ndarray] | None = None


@dataclass
class Tree:
    """The tree of a window: ``bits`` (the root spans 2**bits ns), ``bins`` per inner
    node and lane, and the nodes that hold something, by (depth, index)."""

    bits: int
    bins: int
    nodes: dict[tuple[int, int], Node] = field(default_factory=dict)

    def width(self, depth: int) -> int:
        """The span of a node ``depth`` deep, in ns."""
        return 1 << (self.bits - _FAN_BITS * depth)

    def bin_shift(self, depth: int) -> int:
        """log2 of the width of a bin of a node ``depth`` deep (bins of at least 1 ns)."""
        return max(self.bits - _FAN_BITS * depth - (self.bins.bit_length() - 1), 0)


def bit_length(x: np.ndarray) -> np.ndarray:
    """The bit length of each non-negative int64 (0 for 0): the exponent frexp
    gives each 32-bit half (exact in a float64)."""
    x = np.asarray(x, np.int64)
    high, low = x >> 32, x & 0xFFFF_FFFF
    return np.where(high > 0, np.frexp(high.astype(np.float64))[1] + 32,
                    np.frexp(low.astype(np.float64))[1]).astype(np.int64)


def build(bars: BarSet, span: int, lanes: int) -> Tree:
    """The tree of ``bars`` over a window of ``span`` ns, with ``lanes`` lanes."""
    bits = max(int(span).bit_length(), _FAN_BITS)
    bits += bits % _FAN_BITS  # node widths are whole powers of FANOUT down to 1 ns
    bins = 1 << int(np.clip(np.log2(max(AGGREGATE_GLYPHS // max(lanes, 1), 1)),
                            np.log2(MIN_BINS), np.log2(MAX_BINS)))
    tree = Tree(bits, bins)
    deepest = min(MAX_DEPTH, bits // _FAN_BITS)
    by_begin = np.argsort(bars.begin, kind="stable")
    # (Sorted stably: both are about sorted already, which timsort makes quick.)
    sorted_begin, sorted_end = bars.begin[by_begin], np.sort(bars.end, kind="stable")
    # Top down: a node is inner while it intersects more than LEAF_BARS bars.  The
    # nodes of a depth are the children of the inner nodes above; those that are not
    # inner (the leaves, and the empty spans) tile the window.
    nodes: list[np.ndarray] = []
    inner: list[np.ndarray] = []
    tiles: list[np.ndarray] = []
    tile_depth: list[np.ndarray] = []
    candidates = np.zeros(1, np.int64)
    for depth in range(deepest + 1):
        width = tree.width(depth)
        start = candidates * width
        count = (np.searchsorted(sorted_begin, start + width, "left")
                 - np.searchsorted(sorted_end, start, "right"))
        is_busy = (count > LEAF_BARS) & (depth < deepest)
        nodes.append(candidates)
        inner.append(candidates[is_busy])
        tiles.append(start[~is_busy])
        tile_depth.append(np.full(int((~is_busy).sum()), depth, np.int8))
        if not is_busy.any():
            break
        candidates = ((inner[-1][:, None] << _FAN_BITS) + np.arange(FANOUT)).ravel()
    # Each bar goes down its path until a leaf (the tile holding its begin) or, when
    # it ends beyond that tile, the deepest node that holds it whole (as deep as its
    # begin and last nanosecond agree): an inner node above.
    tile_start = np.concatenate(tiles)
    by_start = np.argsort(tile_start)
    tile_start, tile_end = tile_start[by_start], np.append(tile_start[by_start][1:], 1 << bits)
    tile = np.searchsorted(tile_start, bars.begin, "right") - 1
    where_depth = np.concatenate(tile_depth)[by_start][tile]
    crossing = np.flatnonzero(bars.end > tile_end[tile])
    where_depth[crossing] = (bits - bit_length(bars.begin[crossing] ^ (bars.end[crossing] - 1))
                             ) // _FAN_BITS
    # The bars depth by depth, then by begin: each node's are a slice.
    bars = bars.take(by_begin[np.argsort(where_depth[by_begin], kind="stable")])
    offsets = np.append(0, np.cumsum(np.bincount(where_depth, minlength=len(nodes))))
    for depth, (indices, busy) in enumerate(zip(nodes, inner)):
        a, b = int(offsets[depth]), int(offsets[depth + 1])
        at = np.append(np.searchsorted(bars.begin[a:b], indices * tree.width(depth)) + a, b)
        for index, lo, hi, is_inner in zip(indices.tolist(), at[:-1].tolist(), at[1:].tolist(),
                                           np.isin(indices, busy).tolist()):
            if lo < hi or is_inner:
                tree.nodes[(depth, index)] = Node(depth, index, not is_inner, bars.slice(lo, hi))
    _aggregate(tree, bars, offsets, inner)
    return tree


@dataclass
class _Groups:
    """Each bar's (lane, layer, kind) as one number, in their order: ``of_bar``, below
    2**``bits``: (lane * layers + layer) * kinds + kind, or its rank among those
    present (``present``, when that number would not leave room for the bins)."""

    of_bar: np.ndarray
    bits: int
    layers: int
    kinds: int
    present: np.ndarray | None

    def split(self, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The lane, layer and kind of each group."""
        combined = self.present[group] if self.present is not None else group
        return (combined // (self.layers * self.kinds), combined // self.kinds % self.layers,
                combined % self.kinds)


def _groups(bars: BarSet, bin_bits: int) -> _Groups:
    """The groups of ``bars``, numbered densely when the combination of lane, layer
    and kind would leave fewer than ``bin_bits`` bits of an int64 for the bins."""
    lanes, layers, kinds = (int(c.max()) + 1 if len(c) else 1
                            for c in (bars.lane, bars.layer, bars.kind))
    most = lanes * layers * kinds - 1
    # (In int32 when it holds them: half the memory.)
    combined = ((bars.lane.astype(np.int32 if most < 1 << 31 else np.int64) * layers
                 + bars.layer) * kinds + bars.kind)
    if most.bit_length() + bin_bits <= 62:
        return _Groups(combined, most.bit_length(), layers, kinds, None)
    present, rank = np.unique(combined, return_inverse=True)
    return _Groups(rank.ravel(), (len(present) - 1).bit_length(), layers, kinds,
                   present.astype(np.int64))


def _aggregate(tree: Tree, bars: BarSet, offsets: np.ndarray,
               inner: list[np.ndarray]) -> None:
    """Fills the aggregate of every inner node: per lane, layer and bin, the time
    each kind covers (from the deepest inner level up: a level's bins are made of
    FANOUT bins of the level below, plus the bars kept one level down:
    ``_core.lod_sum``), then the kind covering most, its share, the bars and the
    site of the largest (``_glyphs``).  ``bars`` are depth by depth, those of depth d
    from row ``offsets[d]``."""
    levels = [depth for depth, busy in enumerate(inner) if len(busy)]
    if not levels:
        return
    groups = _groups(bars, tree.bits - tree.bin_shift(levels[-1]) + 1)
    # Per (bin, group) of the level below, by bin then group (key: bin << bits | group).
    table: tuple[np.ndarray, ...] | None = None
    for depth in reversed(levels):
        shift = tree.bin_shift(depth)
        a, b = int(offsets[depth + 1]), int(offsets[depth + 2])
        delta = shift - tree.bin_shift(depth + 1) if table is not None else 0
        table = tuple(np.frombuffer(c, np.int64) for c in _core.lod_sum(
            bars.begin[a:b], bars.end[a:b], groups.of_bar[a:b], bars.site[a:b], shift,
            tree.bits - _FAN_BITS * depth, table, delta, groups.bits))
        node, glyphs = _glyphs(table, groups, shift, tree.bits - _FAN_BITS * depth - shift)
        glyphs["site"] = glyphs["site"].astype(bars.site.dtype)
        ends = np.searchsorted(node, inner[depth], "right")
        for index, lo, hi in zip(inner[depth].tolist(),
                                 np.searchsorted(node, inner[depth]).tolist(), ends.tolist()):
            tree.nodes[(depth, index)].aggregate = (
                {k: v[lo:hi] for k, v in glyphs.items()} if lo < hi
                else {f: np.empty(0, np.int64) for f in AGGREGATE_FIELDS})


def _glyphs(table: tuple[np.ndarray, ...], groups: _Groups, shift: int,
            node_shift: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The glyphs of a level's table (``lod_sum``'s): per node, lane, layer and bin
    the kind covering most (its share, the bars of every kind, the site of that
    kind's largest bar, the first kind of the most covering), consecutive bins alike
    as one; each glyph's node (its bins >> ``node_shift``) and the glyphs by node,
    lane, layer and bin."""
    key, covered, bars, _, site = table
    bin_ = key >> groups.bits
    group = key & ((1 << groups.bits) - 1)
    lane, layer, kind = groups.split(group)
    # The rows of a (bin, lane, layer) are one run, by kind.
    new = np.ones(len(key), bool)
    new[1:] = (bin_[1:] != bin_[:-1]) | (lane[1:] != lane[:-1]) | (layer[1:] != layer[:-1])
    at = np.flatnonzero(new)
    most = np.maximum.reduceat(covered, at)
    hits = np.flatnonzero(covered == np.repeat(most, np.diff(np.append(at, len(key)))))
    pick = hits[np.searchsorted(hits, at)]
    node = bin_[pick] >> node_shift
    order = np.lexsort((bin_[pick], layer[pick], lane[pick], node))
    pick, node = pick[order], node[order]
    top = {"lane": lane[pick], "layer": layer[pick], "kind": kind[pick], "bin": bin_[pick],
           "site": site[pick]}
    cell_bars = np.add.reduceat(bars, at)[order]
    share = np.minimum(covered[pick] / float(1 << shift), 1.0)
    step = np.maximum(np.ceil(share * SHARE_STEPS), 1).astype(np.int64)
    # Consecutive bins of one node, lane, layer, kind, site and step: one glyph.
    run = np.ones(len(pick), bool)
    run[1:] = ((node[1:] != node[:-1])
               | (top["lane"][1:] != top["lane"][:-1]) | (top["layer"][1:] != top["layer"][:-1])
               | (top["kind"][1:] != top["kind"][:-1]) | (top["site"][1:] != top["site"][:-1])
               | (step[1:] != step[:-1]) | (top["bin"][1:] != top["bin"][:-1] + 1))
    starts = np.flatnonzero(run)
    summed = np.add.reduceat(share, starts)
    bins = np.diff(np.append(starts, len(pick)))
    return node[starts], {
        "lane": top["lane"][starts], "bin": top["bin"][starts], "bins": bins,
        "kind": top["kind"][starts], "share": np.round(summed / bins * 255).astype(np.int64),
        "bars": np.add.reduceat(cell_bars, starts), "site": top["site"][starts]}


# ---- blobs ---------------------------------------------------------------------------------


def _smallest(values: np.ndarray) -> np.ndarray:
    """``values`` (integers >= 0) in the smallest of uint8, uint16, uint32 or float64."""
    most = int(values.max()) if len(values) else 0
    for dtype in (np.uint8, np.uint16, np.uint32):
        if most <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values.astype(np.float64)


_CODES = {np.dtype(np.uint8): "u1", np.dtype(np.uint16): "u2", np.dtype(np.uint32): "u4",
          np.dtype(np.float64): "f8"}


def encode(columns: list[np.ndarray]) -> dict:
    """A blob: ``n`` rows, ``types`` (of each column: u1, u2, u4 or f8, little-endian)
    and ``data``, the columns one after the other, deflated and base64-encoded."""
    small = [_smallest(np.asarray(c, np.int64)) for c in columns]
    raw = b"".join(c.astype(c.dtype.newbyteorder("<"), copy=False).tobytes() for c in small)
    return {"n": len(columns[0]) if columns else 0, "types": [_CODES[c.dtype] for c in small],
            "data": base64.b64encode(zlib.compress(raw, 1)).decode("ascii")}


def encode_all(blobs: list[list[np.ndarray]]) -> list[dict]:
    """The blob of each list of columns (encode), on a pool of threads: deflating
    releases the GIL, so the blobs are made on every core."""
    if len(blobs) < 2:
        return [encode(columns) for columns in blobs]
    with ThreadPoolExecutor() as pool:
        return list(pool.map(encode, blobs))


def decode(blob: dict, fields: list[str]) -> dict[str, np.ndarray]:
    """The columns of a blob (what the view's JavaScript does, for tests)."""
    raw = zlib.decompress(base64.b64decode(blob["data"]))
    out, at, n = {}, 0, blob["n"]
    for name, code in zip(fields, blob["types"]):
        dtype = np.dtype({"u1": "<u1", "u2": "<u2", "u4": "<u4", "f8": "<f8"}[code])
        out[name] = np.frombuffer(raw, dtype, n, at).astype(np.int64)
        at += n * dtype.itemsize
    return out


def bar_columns(b: BarSet, start: int) -> list[np.ndarray]:
    """The columns of BAR_FIELDS of bars sorted by begin, in a node starting at ``start``."""
    return [b.lane, np.diff(b.begin, prepend=start), b.end - b.begin, b.kind, b.site, b.team,
            b.wait + 1, b.sub, b.tracks]


def aggregate_columns(a: dict[str, np.ndarray], first_bin: int) -> list[np.ndarray]:
    """The columns of AGGREGATE_FIELDS of an aggregate whose node starts at bin
    ``first_bin``, its glyphs sorted by bin."""
    order = np.argsort(a["bin"], kind="stable")
    a = {k: v[order] for k, v in a.items()}
    return [a["lane"], np.diff(a["bin"], prepend=first_bin), a["bins"], a["kind"], a["share"],
            a["bars"], a["site"]]
