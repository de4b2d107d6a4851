// The level-of-detail switch of ompt-py's view: a Bokeh CustomJS callback on the
// x range (ompt_py/presentation/view.py makes it, lod.py says what the nodes and
// blobs are).  When the range changes, it picks the depth whose nodes are as wide
// as the range, walks the tree over the range, inflates the blobs it needs (once
// each) and gives the two sources the exact bars and the aggregates to draw.
// args: x (the range), bars and agg (the sources), nodes ({"depth/index": [leaf,
// bars blob, aggregate blob]}), blobs, tree ({bits, fan_bits, deepest, origin_ms,
// shifts: the bin shift of each depth}), kinds ({bottom, top, layer}).  When the
// sources hold a range's data, ``done`` (of window.omptpy_view[x.id]) is ``seq``.
const state = (window.omptpy_view ??= {});
const me = (state[x.id] ??= {cache: new Map(), timer: null, seq: 0});
clearTimeout(me.timer);
const seq = ++me.seq;  // now: a range whose data is not drawn yet
me.timer = setTimeout(() => update(seq), 40);

const TYPES = {u1: Uint8Array, u2: Uint16Array, u4: Uint32Array, f8: Float64Array};

async function columns(id) {
  if (!me.cache.has(id)) {
    me.cache.set(id, (async () => {
      const blob = blobs[id];
      const packed = Uint8Array.from(atob(blob.data), (c) => c.charCodeAt(0));
      const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("deflate"));
      const raw = new Uint8Array(await new Response(stream).arrayBuffer());
      const out = [];
      let at = 0;
      for (const type of blob.types) {
        const T = TYPES[type], size = blob.n * T.BYTES_PER_ELEMENT;
        out.push(new T(raw.slice(at, at + size).buffer));
        at += size;
      }
      return out;
    })());
  }
  return me.cache.get(id);
}

// Rows in the order of their kind's layer (later layers drawn on top).
function by_layer(kind) {
  const count = new Array(8).fill(0);
  for (const k of kind) count[kinds.layer[k] + 1]++;
  for (let i = 1; i < count.length; i++) count[i] += count[i - 1];
  const order = new Uint32Array(kind.length);
  kind.forEach((k, i) => { order[count[kinds.layer[k]]++] = i; });
  return order;
}

async function update(seq) {
  const lo = (x.start - tree.origin_ms) * 1e6, hi = (x.end - tree.origin_ms) * 1e6;
  const fan = 1 << tree.fan_bits;
  const depth = Math.max(0, Math.min(tree.deepest, Math.floor(
    Math.log(2 ** tree.bits / Math.max(hi - lo, 1)) / Math.log(fan))));
  const exact = [], aggregates = [];
  (function visit(d, i) {
    const width = 2 ** (tree.bits - tree.fan_bits * d), start = i * width;
    const node = nodes[d + "/" + i];
    if (start >= hi || start + width <= lo || node === undefined) return;
    if (node[1] !== null) exact.push([node[1], start]);
    if (node[0]) return;
    if (d >= depth) { aggregates.push([node[2], start, tree.shifts[d]]); return; }
    for (let c = 0; c < fan; c++) visit(d + 1, i * fan + c);
  })(0, 0);
  const got_bars = await Promise.all(exact.map(([id]) => columns(id)));
  const got_aggs = await Promise.all(aggregates.map(([id]) => columns(id)));
  if (seq !== me.seq) return;  // a newer range is on its way
  bars.data = assemble(got_bars, exact, (cols, start, put) => {
    const [lane, begin, duration, kind, site, team, wait, sub, tracks] = cols;
    let t = start;
    for (let r = 0; r < lane.length; r++) {
      t += begin[r];
      const b = kinds.bottom[kind[r]], h = (kinds.top[kind[r]] - b) / tracks[r];
      put(lane[r], t, t + duration[r], kind[r], site[r], team[r], wait[r] - 1,
          lane[r] + b + h * sub[r], lane[r] + b + h * (sub[r] + 1), duration[r], 1);
    }
  }, ["team", "wait"]);
  agg.data = assemble(got_aggs, aggregates, (cols, start, put, shift) => {
    const [lane, bin, bins, kind, share, count, site] = cols;
    const w = 2 ** shift;
    let b0 = start / w;
    for (let r = 0; r < lane.length; r++) {
      b0 += bin[r];
      const k = kind[r];
      put(lane[r], b0 * w, (b0 + bins[r]) * w, k, site[r], count[r], share[r] / 255,
          lane[r] + kinds.bottom[k], lane[r] + kinds.top[k], bins[r] * w,
          0.3 + 0.7 * share[r] / 255);
    }
  }, ["bars", "share"]);
  me.done = seq;
}

// The columns of a source from decoded blobs: fill(cols, node start, put, shift)
// calls put(lane, begin_ns, end_ns, kind, site, first, second, bottom, top,
// duration_ns, alpha) for each row; ``named``: the names of first and second.
function assemble(decoded, wanted, fill, named) {
  const rows = decoded.reduce((n, cols) => n + cols[0].length, 0);
  const c = {left: new Float64Array(rows), right: new Float64Array(rows),
             bottom: new Float32Array(rows), top: new Float32Array(rows),
             kind: new Uint8Array(rows), site: new Uint32Array(rows), lane: new Uint32Array(rows),
             [named[0]]: new Float64Array(rows), [named[1]]: new Float64Array(rows),
             dur: new Float64Array(rows), alpha: new Float32Array(rows)};
  const first = c[named[0]], second = c[named[1]];
  let n = 0;
  const put = (lane, b, e, kind, site, one, two, y0, y1, dur, alpha) => {
    c.lane[n] = lane; c.left[n] = tree.origin_ms + b / 1e6; c.right[n] = tree.origin_ms + e / 1e6;
    c.kind[n] = kind; c.site[n] = site; first[n] = one; second[n] = two;
    c.bottom[n] = y0; c.top[n] = y1; c.dur[n] = dur; c.alpha[n] = alpha; n++;
  };
  decoded.forEach((cols, j) => fill(cols, wanted[j][1], put, wanted[j][2]));
  const order = by_layer(c.kind);
  const out = {};
  for (const [name, col] of Object.entries(c)) {
    const sorted = new col.constructor(rows);
    order.forEach((from, to) => { sorted[to] = col[from]; });
    out[name] = sorted;
  }
  out.py = out.site; out.loc = out.site;
  return out;
}
