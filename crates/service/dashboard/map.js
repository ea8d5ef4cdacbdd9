// Netmapper's map (GET /v1/map) as an inline SVG: agents and routers left to right by hop,
// edges labelled with their bound; bottleneck edges ("=B", Tneck named them) in red and
// thick. No library: the page stays dependency-free. Hidden when the agent has no [map].
(function () {
  'use strict';
  const NS = 'http://www.w3.org/2000/svg';
  const section = document.getElementById('netmap');
  if (!section) return;
  const box = section.querySelector('.mapsvg');
  const note = section.querySelector('.mapnote');
  // The same token the rest of the page uses (app.js: ?access_token=...).
  const token = new URLSearchParams(location.search).get('access_token');

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    return e;
  }
  const mbit = (bps) => (bps / 1e6).toFixed(bps >= 1e8 ? 0 : 1);

  /** Column of each node: its largest hop index on any path (sources at 0). */
  function layout(g) {
    const col = new Map();
    for (const p of g.paths) {
      if (!p.edges.length) continue;
      const first = g.edges[p.edges[0]];
      col.set(first.from, Math.max(col.get(first.from) || 0, 0));
      p.edges.forEach((ei, i) => {
        const e = g.edges[ei];
        col.set(e.to, Math.max(col.get(e.to) || 0, i + 1));
      });
    }
    const cols = [];
    for (const [n, c] of col) (cols[c] = cols[c] || []).push(n);
    const pos = new Map();
    const W = 170, H = 70;
    const rows = Math.max(1, ...cols.map((c) => (c ? c.length : 0)));
    cols.forEach((ns, c) => {
      (ns || []).sort((a, b) => a - b).forEach((n, i) => {
        const off = (rows - ns.length) * H / 2;
        pos.set(n, { x: 70 + c * W, y: 40 + off + i * H });
      });
    });
    return { pos, width: 140 + (cols.length - 1) * W, height: 40 + rows * H };
  }

  function draw(m) {
    const g = m.graph;
    const { pos, width, height } = layout(g);
    const svg = el('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img',
      'aria-label': 'network map' });
    const defs = el('defs', {});
    for (const [id, color] of [['arr', '#888'], ['arrb', '#d33']]) {
      const mk = el('marker', { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 6,
        markerHeight: 6, orient: 'auto-start-reverse' });
      mk.appendChild(el('path', { d: 'M0,0 L10,5 L0,10 z', fill: color }));
      defs.appendChild(mk);
    }
    svg.appendChild(defs);
    for (const e of g.edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const bn = e.bound === '=';
      const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
      const r = 14;
      const line = el('line', { x1: a.x + dx / len * r, y1: a.y + dy / len * r,
        x2: b.x - dx / len * r, y2: b.y - dy / len * r,
        stroke: bn ? '#d33' : '#888', 'stroke-width': bn ? 4 : 1.5,
        'marker-end': `url(#${bn ? 'arrb' : 'arr'})`, class: bn ? 'edge bottleneck' : 'edge' });
      const t = el('title', {}, `${g.nodes[e.from].label} → ${g.nodes[e.to].label}: ${e.bound}${mbit(e.value_bps)} Mbit/s` +
        (e.evidence ? `\n${e.evidence}` : '') +
        (e.measured_at_ms ? `\n${new Date(e.measured_at_ms).toISOString()}` : ''));
      line.appendChild(t);
      svg.appendChild(line);
      svg.appendChild(el('text', { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 - 6, 'text-anchor': 'middle',
        class: bn ? 'elabel bottleneck' : 'elabel', fill: bn ? '#d33' : '#555',
        'font-size': 12, 'font-weight': bn ? 'bold' : 'normal' }, `${e.bound}${mbit(e.value_bps)}`));
    }
    for (const n of g.nodes) {
      const p = pos.get(n.id);
      if (!p) continue;
      const agent = n.kind === 'agent';
      svg.appendChild(el('circle', { cx: p.x, cy: p.y, r: 12,
        fill: agent ? '#2b6cb0' : n.kind === 'silent' ? '#fff' : '#ccc',
        stroke: '#333', 'stroke-dasharray': n.kind === 'silent' ? '3,2' : 'none' }));
      svg.appendChild(el('text', { x: p.x, y: p.y + 26, 'text-anchor': 'middle', 'font-size': 11,
        fill: '#222' }, n.kind === 'silent' ? '*' : n.label));
    }
    box.replaceChildren(svg);
    const st = m.stats;
    const bns = g.edges.filter((e) => e.bound === '=').length;
    note.textContent = `${bns} bottleneck edge(s) in red (=B: Tneck named it; >B: a lower bound) · ` +
      `${st.flows} TCP flows in ${st.steps} steps (naive: ${st.naive_flows}) · ` +
      `mapped ${new Date(m.at_ms).toISOString().replace('T', ' ').slice(0, 19)} UTC`;
  }

  async function refresh() {
    const u = new URL('/v1/map', location.origin);
    if (token) u.searchParams.set('access_token', token);
    try {
      const r = await fetch(u, { cache: 'no-store' });
      if (r.status === 404) { section.hidden = true; document.body.dataset.map = 'off'; return; }
      const s = await r.json();
      section.hidden = false;
      if (s.map) {
        draw(s.map);
        document.body.dataset.map = 'ready';
      } else {
        note.textContent = s.running ? 'the first map is being made…' :
          (s.last_error ? `no map: ${s.last_error}` : 'no map yet');
        document.body.dataset.map = 'waiting';
      }
    } catch (e) {
      note.textContent = `map: ${e}`;
    }
  }
  refresh();
  setInterval(refresh, 30000);
})();
