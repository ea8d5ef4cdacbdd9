/* mgrp dashboard: the agent's estimates per path, live. Plain JS, no build step; charts by uPlot
 * (vendor/, served by the agent like this file).
 *
 * Where the data comes from (see /v1/openapi.yaml):
 * - /v1/paths and /v1/schedules: which paths have estimates, and each schedule's counters;
 * - per metric of the selected path, its series over the window: /v1/records for 5 min (every
 *   raw estimate with its [low, high] range, drawn as a band), /v1/history for 1 h and 24 h
 *   (mean per step, the band is the step's min–max); its newest estimate: /v1/estimate;
 * - /v1/transfer: the eBPF transfer modes (per-mode counters, what the map holds per destination),
 *   shown in their own panel when the agent's configuration has [transfer];
 * - /v1/mpat: MPAT aggregates (members, weights, shares, rates, shared-bottleneck warnings), in
 *   their own panel when the configuration has [mpat] (data-mpat: off | unavailable | available);
 * - /v1/events (Server-Sent Events): each new avail_bw estimate, drawn as it arrives. A poll
 *   refreshes everything every few seconds, more often when the event stream is unavailable, so
 *   the page keeps working without it.
 * `?access_token=T` in the page's URL is passed on to every API call (clients off localhost).
 *
 * For tests, <body> carries data-state (loading | waiting | live | error), data-points (avail_bw
 * estimates drawn in the top plot), data-sse (off | open | reconnecting | unavailable),
 * data-transfer (off | unavailable | available) and data-error (the banner's text, empty when
 * none).
 */
(function () {
  'use strict';

  const params = new URLSearchParams(location.search);
  const TOKEN = params.get('access_token');

  // Display units: bandwidths in Mbit/s, RTT, jitter and episode durations in ms, loss and episodes in %.
  const METRICS = {
    avail_bw: { title: 'available bandwidth', unit: 'Mbit/s', scale: 1e-6, color: '#2563eb' },
    capacity: { title: 'capacity', unit: 'Mbit/s', scale: 1e-6, color: '#7c3aed' },
    rtt: { title: 'RTT', unit: 'ms', scale: 1e3, color: '#d97706' },
    loss: { title: 'probe loss', unit: '%', scale: 100, color: '#dc2626' },
    // loss_episodes schedules (badabing): share of time congested, mean episode length.
    episode_frequency: { title: 'loss episodes', unit: '% of time', scale: 100, color: '#be185d' },
    episode_duration: { title: 'episode duration', unit: 'ms', scale: 1e3, color: '#0f766e' },
    // One-way-delay variation read from the trains already sent (RFC 3550 over detrended IPDV).
    jitter: { title: 'jitter', unit: 'ms', scale: 1e3, color: '#0891b2' },
  };
  // On a testbed run with --dashboard the bottleneck's ground truth is stored beside avail_bw.
  const TRUTH = 'avail_bw_truth';

  const WINDOWS = {
    '5m': { span: 300, records: true, note: 'every estimate · band: its range [low, high]', short: 'band: range' },
    '1h': { span: 3600, step: 10, note: 'mean per 10 s · band: min–max of the step', short: 'mean per 10 s · band: min–max' },
    '24h': { span: 86400, step: 300, note: 'mean per 5 min · band: min–max of the step', short: 'mean per 5 min · band: min–max' },
  };

  const POLL_WITH_EVENTS_MS = 5000; // full refresh while the event stream pushes estimates
  const POLL_ALONE_MS = 2000; // full refresh when it does not
  const KICK_MIN_MS = 3000; // a pushed estimate refreshes the other plots, at most this often
  const EVENTS_RETRY_MS = 30000; // reopen an event stream that the agent refused

  const st = {
    path: params.get('path'),
    win: WINDOWS[params.get('window')] ? params.get('window') : '5m',
    known: new Map(), // path -> Set of metrics with estimates
    schedules: [],
    raw: {}, // metric -> {x, v, lo, hi}: x in Unix seconds, values in display units
    latest: {}, // metric -> newest Record
    plots: {}, // metric -> {u: uPlot, key}
    agentNow: 0, // the agent's clock (its Date header, newest estimate), Unix seconds
    xRange: null, // shared by all plots
    spent: [], // [browser ms, schedule's probe_bytes] over the last minute
    es: null,
    esPath: null,
    esRetryAt: 0,
    sse: 'off',
    timer: null, // the next poll
    kickTimer: null, // the next refresh asked for by a pushed estimate
    started: 0, // when the last refresh started (browser ms)
    busy: false,
    again: false,
    error: '',
  };

  const $ = (sel) => document.querySelector(sel);
  const esc = (s) =>
    String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

  // ---- formatting -------------------------------------------------------------------------

  /** A value already in display units, with precision that suits its size. */
  function num(x) {
    if (x == null || !isFinite(x)) return '—';
    const a = Math.abs(x);
    return x.toFixed(a >= 1000 ? 0 : a >= 100 ? 1 : 2);
  }
  const disp = (m, v) => (v == null ? null : v * METRICS[m === TRUTH ? 'avail_bw' : m].scale);

  const pad = (n) => String(n).padStart(2, '0');
  /** Unix seconds as local HH:MM[:SS]; a midnight tick says the date instead. */
  function clock(t, secs) {
    const d = new Date(t * 1000);
    if (!secs && d.getHours() === 0 && d.getMinutes() === 0) return `${d.getMonth() + 1}-${pad(d.getDate())}`;
    return `${pad(d.getHours())}:${pad(d.getMinutes())}${secs ? `:${pad(d.getSeconds())}` : ''}`;
  }

  /** Bytes in binary units, as the agent's configuration counts them (`20mb` = 20 MiB). */
  function bytes(n) {
    if (n == null) return '—';
    if (n < 1024) return `${n} B`;
    if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
    if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
    return `${(n / 1024 ** 3).toFixed(2)} GiB`;
  }

  function ago(tNs) {
    const s = Math.max(0, st.agentNow - tNs / 1e9);
    if (s < 2) return 'just now';
    if (s < 120) return `${Math.round(s)} s ago`;
    if (s < 7200) return `${Math.round(s / 60)} min ago`;
    return `${(s / 3600).toFixed(1)} h ago`;
  }

  // ---- the API ----------------------------------------------------------------------------

  function apiUrl(route, q) {
    const u = new URL(route, location.origin);
    for (const [k, v] of Object.entries(q || {})) if (v != null) u.searchParams.set(k, v);
    if (TOKEN) u.searchParams.set('access_token', TOKEN);
    return u;
  }

  /** GET a JSON answer; a refusal throws with the agent's `error` text. */
  async function api(route, q) {
    let r;
    try {
      r = await fetch(apiUrl(route, q), { cache: 'no-store' });
    } catch (e) {
      throw new Error(`agent unreachable (${route}): ${e.message}`);
    }
    const date = Date.parse(r.headers.get('date') || '');
    if (date) st.agentNow = Math.max(st.agentNow, date / 1000);
    const text = await r.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch (_) {
      /* reported below */
    }
    if (!r.ok) {
      const why = (body && body.error) || text.slice(0, 200) || r.statusText;
      throw new Error(`${route} answered ${r.status}: ${why}`);
    }
    if (body === null) throw new Error(`${route}: the answer is not JSON`);
    return body;
  }

  /** A metric's series over the window, in display units. */
  async function fetchSeries(path, m, w) {
    const out = { x: [], v: [], lo: [], hi: [] };
    if (w.records) {
      // The window ends at the agent's now (its default to_ns); start it by the agent's clock.
      const from = Math.round((st.agentNow - w.span) * 1e9);
      const recs = await api('/v1/records', { path, metric: m, from_ns: from > 0 ? String(from) : null });
      out.last = recs[recs.length - 1] || null; // the newest estimate, with its quality
      for (const r of recs) {
        out.x.push(r.t_ns / 1e9);
        out.v.push(disp(m, r.value));
        out.lo.push(disp(m, r.low));
        out.hi.push(disp(m, r.high));
      }
    } else {
      const ans = await api('/v1/history', { path, metric: m, step: `${w.step}s`, count: String(w.span / w.step) });
      for (const p of ans.points) {
        // The middle of the step; the current step's, not in the future.
        out.x.push(Math.min(p.start_ns / 1e9 + w.step / 2, Math.max(st.agentNow, p.start_ns / 1e9)));
        out.v.push(disp(m, p.mean));
        out.lo.push(disp(m, p.min));
        out.hi.push(disp(m, p.max));
      }
    }
    return out;
  }

  // ---- refresh: everything the page shows, from the API -----------------------------------

  async function refresh() {
    if (st.busy) {
      st.again = true;
      return;
    }
    st.busy = true;
    clearTimeout(st.timer);
    st.started = Date.now();
    const path0 = st.path;
    const win = st.win;
    try {
      const [paths, schedules, transfer, mpat] = await Promise.all([
        api('/v1/paths'),
        api('/v1/schedules'),
        api('/v1/transfer'),
        api('/v1/mpat'),
      ]);
      st.schedules = schedules;
      transferPanel(transfer);
      mpatPanel(mpat);
      const known = new Map();
      for (const { path, metric } of paths) {
        if (!known.has(path)) known.set(path, new Set());
        known.get(path).add(metric);
      }
      for (const s of schedules) if (s.path && !known.has(s.path)) known.set(s.path, new Set());
      st.known = known;
      // The path asked for (selector, URL), or a default; not one the agent no longer knows.
      if (!st.path || !known.has(st.path)) {
        st.path = defaultPath();
        if (st.path !== path0) remember();
      }
      const path = st.path;
      fillSelector();
      noteSpent();
      if (!st.path) {
        waiting();
      } else {
        openEvents();
        const w = WINDOWS[win];
        const have = known.get(path);
        const ms = [...Object.keys(METRICS), TRUTH].filter((m) => have.has(m));
        // Each metric's series, and its newest estimate where the series does not end with it.
        const got = await Promise.all(
          ms.map(async (m) => {
            const s = await fetchSeries(path, m, w);
            const newest = s.last || (await api('/v1/estimate', { path, metric: m }));
            return [s, newest];
          }),
        );
        // The user switched path or window meanwhile: this answer is for the old one.
        if (st.path !== path || st.win !== win) {
          st.again = true;
        } else {
          st.raw = {};
          st.latest = {};
          ms.forEach((m, i) => {
            st.raw[m] = got[i][0];
            if (got[i][1]) st.latest[m] = got[i][1];
          });
          draw();
        }
      }
      setError('');
      $('#updated').textContent = `updated ${clock(Date.now() / 1000, true)}`;
    } catch (e) {
      setError(e.message);
    } finally {
      st.busy = false;
      if (st.again) {
        st.again = false;
        setTimeout(refresh, 0);
      } else {
        st.timer = setTimeout(refresh, st.sse === 'open' ? POLL_WITH_EVENTS_MS : POLL_ALONE_MS);
      }
      status();
    }
  }

  /** Refresh soon (other metrics of the measurement that just pushed an estimate), once. */
  function kick() {
    if (st.kickTimer) return;
    const wait = Math.max(800, st.started + KICK_MIN_MS - Date.now());
    st.kickTimer = setTimeout(() => {
      st.kickTimer = null;
      refresh();
    }, wait);
  }

  /** A scheduled path with estimates first, then any with avail_bw, then any. */
  function defaultPath() {
    const paths = [...st.known.keys()];
    const sched = new Set(st.schedules.map((s) => s.path));
    return (
      paths.find((p) => sched.has(p) && st.known.get(p).has('avail_bw')) ||
      paths.find((p) => st.known.get(p).has('avail_bw')) ||
      paths[0] ||
      null
    );
  }

  // ---- events (SSE) -----------------------------------------------------------------------

  function setSse(s) {
    st.sse = s;
    document.body.dataset.sse = s;
    status();
  }

  function closeEvents() {
    if (st.es) st.es.close();
    st.es = null;
    st.esPath = null;
  }

  function openEvents() {
    if (st.es && st.esPath === st.path) return;
    if (st.esPath === st.path && Date.now() < st.esRetryAt) return; // refused lately
    closeEvents();
    if (typeof EventSource === 'undefined') return setSse('unavailable');
    const es = new EventSource(apiUrl('/v1/events', { path: st.path, metric: 'avail_bw' }));
    st.es = es;
    st.esPath = st.path;
    es.onopen = () => setSse('open');
    es.addEventListener('estimate', (ev) => {
      try {
        onEstimate(JSON.parse(ev.data).record);
      } catch (e) {
        setError(`/v1/events: ${e.message}`);
      }
    });
    es.addEventListener('lagged', kick); // missed some: fetch them
    es.onerror = () => {
      if (es !== st.es) return;
      if (es.readyState === EventSource.CLOSED) {
        // Refused (an agent without /v1/events, a bad token): poll, and try again later.
        st.es = null;
        st.esRetryAt = Date.now() + EVENTS_RETRY_MS;
        setSse('unavailable');
      } else {
        setSse('reconnecting'); // the browser retries by itself
      }
    };
  }

  /** A new avail_bw estimate pushed by the agent: draw it now, refresh the rest soon. */
  function onEstimate(r) {
    if (!r || r.path !== st.path || r.metric !== 'avail_bw') return;
    st.latest.avail_bw = r;
    const t = r.t_ns / 1e9;
    st.agentNow = Math.max(st.agentNow, t);
    const s = st.raw.avail_bw;
    if (WINDOWS[st.win].records && s && (s.x.length === 0 || t > s.x[s.x.length - 1])) {
      s.x.push(t);
      s.v.push(disp('avail_bw', r.value));
      s.lo.push(disp('avail_bw', r.low));
      s.hi.push(disp('avail_bw', r.high));
      const cut = s.x.findIndex((x) => x >= st.agentNow - WINDOWS[st.win].span);
      if (cut > 0) for (const k of ['x', 'v', 'lo', 'hi']) s[k].splice(0, cut);
      draw();
    } else {
      card('avail_bw');
    }
    kick();
  }

  // ---- drawing ----------------------------------------------------------------------------

  function draw() {
    // One time axis for all plots: the window, from the oldest point drawn to the agent's now.
    const w = WINDOWS[st.win];
    let first = Infinity;
    let last = -Infinity;
    for (const s of Object.values(st.raw)) {
      if (s.x.length) {
        first = Math.min(first, s.x[0]);
        last = Math.max(last, s.x[s.x.length - 1]);
      }
    }
    const end = Math.max(st.agentNow, last);
    st.xRange = isFinite(first) ? [Math.max(end - w.span, Math.min(first, end - 10)), end] : null;

    let points = 0;
    for (const m of Object.keys(METRICS)) {
      const n = drawPlot(m);
      if (m === 'avail_bw') points = n;
      card(m);
    }
    scheduleCard();
    for (const n of document.querySelectorAll('.plot .note')) n.textContent = w.short;
    $('#plot-avail_bw .note').textContent = w.note + (st.raw[TRUTH] ? ' · dashed: ground truth' : '');
    $('#plot-capacity .note').textContent += ' · measured as a session starts';
    document.body.dataset.points = String(points);
    document.body.dataset.state = st.error ? 'error' : points > 0 ? 'live' : 'waiting';
  }

  const fade = (hex, a) => {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
  };

  function plotOpts(m, width, truth) {
    const d = METRICS[m];
    const hist = !WINDOWS[st.win].records;
    const fmt = (u, v) => (v == null ? '—' : `${num(v)} ${d.unit}`);
    const edge = { stroke: fade(d.color, 0.35), width: 1, spanGaps: true, points: { show: false }, value: fmt };
    const series = [
      { label: 'time', value: (u, t) => (t == null ? '—' : clock(t, true)) },
      {
        label: hist ? 'mean' : 'estimate',
        stroke: d.color,
        width: 2,
        spanGaps: true,
        points: { show: true, size: 5, fill: d.color },
        value: fmt,
      },
      { ...edge, label: hist ? 'min' : 'low' },
      { ...edge, label: hist ? 'max' : 'high' },
    ];
    if (truth) {
      series.push({
        label: 'ground truth',
        stroke: '#15803d',
        width: 1.5,
        dash: [6, 4],
        spanGaps: true,
        points: { show: false },
        value: fmt,
      });
    }
    const axis = { stroke: '#616e7c', grid: { stroke: '#eef2f7', width: 1 }, ticks: { stroke: '#d9e2ec', width: 1 } };
    const main = m === 'avail_bw';
    return {
      width,
      height: main ? 300 : 160,
      series,
      bands: [{ series: [3, 2], fill: fade(d.color, 0.15) }],
      scales: {
        x: { time: true, range: (u, lo, hi) => st.xRange || [lo, hi] },
        // From zero, with headroom; loss at least to 1 %.
        y: { range: (u, lo, hi) => [0, Math.max(hi * 1.15, m === 'loss' ? 1 : 1e-9)] },
      },
      axes: [
        // Local clock time, 24 h; seconds only where ticks are less than a minute apart.
        {
          ...axis,
          // Tick spacing (px): room for HH:MM:SS labels; HH:MM ones fit closer on small plots.
          space: (u, ax, lo, hi) => (main || hi - lo <= 120 ? 70 : 40),
          values: (u, ticks, ax, space, incr) => ticks.map((t) => clock(t, incr < 60)),
        },
        { ...axis, size: 50 },
      ],
      // The small plots say what they show in their caption; the main one has a legend whose
      // values follow the cursor.
      legend: { show: main },
      cursor: { drag: { x: false, y: false } },
    };
  }

  /** Draws (or says why not) a metric's plot; returns the number of estimates drawn. */
  function drawPlot(m) {
    const box = $(`#plot-${m} .chart`);
    const s = st.raw[m];
    const truth = m === 'avail_bw' && st.raw[TRUTH] && st.raw[TRUTH].x.length > 0 ? st.raw[TRUTH] : null;
    let p = st.plots[m];
    if (!s || s.x.length === 0) {
      if (p) p.u.destroy();
      delete st.plots[m];
      const r = st.latest[m];
      box.innerHTML = `<div class="empty">${
        r ? `no ${METRICS[m].title} estimate in this window (newest ${ago(r.t_ns)})` : `no ${METRICS[m].title} estimates yet`
      }</div>`;
      return 0;
    }
    let data = [s.x, s.v, s.lo, s.hi];
    // Estimates and ground truth have their own times: align them, gaps spanned.
    if (truth) data = uPlot.join([data, [truth.x, truth.v]]);
    const key = `${st.win}/${truth ? 'truth' : ''}`;
    if (!p || p.key !== key) {
      if (p) p.u.destroy();
      box.innerHTML = '';
      p = st.plots[m] = { key, u: new uPlot(plotOpts(m, box.clientWidth, !!truth), data, box) };
    } else {
      p.u.setData(data);
    }
    return s.v.filter((v) => v != null).length;
  }

  /** The current value with its range and quality. */
  function card(m) {
    const el = $(`#card-${m}`);
    const d = METRICS[m];
    const r = st.latest[m];
    if (!r) {
      el.querySelector('.value').textContent = '—';
      el.querySelector('.range').textContent = st.path ? 'no estimates yet' : '';
      el.querySelector('.quality').textContent = '';
      return;
    }
    el.querySelector('.value').innerHTML = `${num(disp(m, r.value))}<small>${d.unit}</small>`;
    let range =
      r.low === r.high ? 'no range' : `range ${num(disp(m, r.low))} – ${num(disp(m, r.high))} ${d.unit}`;
    const t = st.latest[TRUTH];
    if (m === 'avail_bw' && t) {
      range += `<br><span class="truth">ground truth ${num(disp(m, t.value))} ${d.unit} (testbed)</span>`;
    }
    el.querySelector('.range').innerHTML = range;
    const q = [`<span class="method">${esc(r.method)}</span>`];
    if (r.probe_bytes) q.push(`${bytes(r.probe_bytes)} probes`);
    if (r.trains) q.push(`${r.trains} trains`);
    if (r.source !== 'active') q.push(esc(r.source));
    q.push(`conf ${Number(r.confidence).toFixed(2)}`);
    // The time scale the value holds over (seed 001 §4), when the method states one.
    if (r.timescale_ms != null) q.push(`over ${num(Number(r.timescale_ms))} ms`);
    if (!r.final) q.push('<span class="rough">rough</span>');
    q.push(ago(r.t_ns));
    el.querySelector('.quality').innerHTML = q.join(' · ');
  }

  /** Remember the selected path's spent probe bytes, to show the rate over the last minute. */
  function noteSpent() {
    const s = st.schedules.find((x) => x.path === st.path);
    const now = Date.now();
    if (!s) {
      st.spent = [];
      return;
    }
    st.spent.push([now, s.counters.probe_bytes || 0]);
    while (st.spent.length > 2 && now - st.spent[0][0] > 60000) st.spent.shift();
  }

  function scheduleCard() {
    const el = $('#card-schedule .sched');
    const s = st.schedules.find((x) => x.path === st.path);
    if (!s) {
      const r = st.latest.avail_bw;
      el.innerHTML = `not scheduled by this agent${r ? ` (estimates from ${esc(r.source)} sources)` : ''}`;
      return;
    }
    const c = s.counters || {};
    const rows = [
      ['method', `${esc(s.method)}, every ${s.every_s} s`],
      ['budget', `${bytes(s.budget_bytes_per_min)}/min${s.budget_configured === false ? ' (default for the capacity)' : ''}`],
      ['measurements', `${c.measurements ?? '—'}`],
      ['probes spent', bytes(c.probe_bytes)],
    ];
    // The probe rate from the counters seen over the last minute (at least 5 s of them).
    const [t0, b0] = st.spent[0] || [0, 0];
    const [t1, b1] = st.spent[st.spent.length - 1] || [0, 0];
    if (t1 - t0 >= 5000) {
      const secs = (t1 - t0) / 1000;
      rows.push([`probe rate, last ${Math.round(secs)} s`, `${num(((b1 - b0) * 8) / secs / 1e6)} Mbit/s`]);
    }
    // The probe load as a share of the path's capacity, beside its ceiling.
    if (s.probe_load_share != null) {
      const over = s.ceiling_share != null && s.probe_load_share > s.ceiling_share;
      const pct = (x) => `${num(x * 100)}%`;
      const load = `${pct(s.probe_load_share)} of C${s.ceiling_share != null ? ` (ceiling ${pct(s.ceiling_share)})` : ''}`;
      rows.push(['probe load, last minute', over ? `<span class="warn">${load}</span>` : load]);
    }
    // Passive or inline estimates that agree with the tracked value stand in for probes.
    if (s.covered_by) rows.push(['active probing', `backed off: covered by ${s.covered_by} (${c.covered} rounds)`]);
    if (c.skipped_for_budget || c.cut_by_budget) {
      rows.push(['budget skips / cuts', `<span class="warn">${c.skipped_for_budget} / ${c.cut_by_budget}</span>`]);
    }
    if (c.errors) rows.push(['errors', `<span class="warn">${c.errors}</span>`]);
    let html = `<table>${rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join('')}</table>`;
    // The budget stopped the last round: the estimate shown is older than the schedule says.
    if (s.budget_exhausted) {
      html += `<div class="warn">budget exhausted: no fresh estimate until the minute's probe bytes free up</div>`;
    }
    if (s.last_error && !s.budget_exhausted) html += `<div class="warn">last error: ${esc(s.last_error)}</div>`;
    else if (s.last_error) html += `<div class="warn">${esc(s.last_error)}</div>`;
    el.innerHTML = html;
  }

  /** Rates in Mbit/s, or a dash. */
  const mbit = (bps) => (bps == null ? '—' : num(bps / 1e6));

  /** The transfer modes: hidden unless configured; why not when unavailable; else per mode
   * and per destination. */
  function transferPanel(t) {
    const el = $('#transfer');
    const state = !t.configured ? 'off' : t.available ? 'available' : 'unavailable';
    document.body.dataset.transfer = state;
    el.hidden = state === 'off';
    if (state === 'off') return;
    const p = t.params || {};
    el.querySelector('.tstatus').innerHTML =
      state === 'available'
        ? `${t.congestion_controls.map((c) => `<span class="method">${esc(c)}</span>`).join(' ')} registered · ` +
          `g ${p.g} · h ${p.h} · estimates older than ${p.max_age_s} s not acted on` +
          (p.correct_own_rate ? ' · own rate added back' : ' · <span class="warn">own rate not added back</span>')
        : `<span class="warn">unavailable: ${esc(t.reason || '?')}</span>`;
    const modes = (t.stats || []).filter((s) => (t.modes || []).includes(s.mode));
    el.querySelector('.tmodes').innerHTML = modes.length
      ? '<tr><th>mode</th><th>flows now</th><th>opened</th><th>acked</th><th>held at cap</th><th>acks without estimate</th><th>losses</th></tr>' +
        modes
          .map(
            (s) =>
              `<tr><td><span class="method">${esc(s.congestion_control)}</span> ${esc(s.mode.replace('_', '-'))}</td>` +
              `<td>${s.flows_active}</td><td>${s.flows_opened}</td><td>${bytes(s.acked_bytes)}</td>` +
              `<td>${s.mode === 'background' ? `${num(s.limited_s)} s` : '—'}</td>` +
              `<td>${s.acks_no_estimate ? `<span class="warn">${s.acks_no_estimate}</span>` : 0}</td><td>${s.losses}</td></tr>`,
          )
          .join('')
      : '';
    const dests = t.destinations || [];
    el.querySelector('.tdests').innerHTML = dests.length
      ? '<tr><th>destination</th><th>A measured</th><th>own rate (added)</th><th>A written</th><th>background now</th><th>age</th></tr>' +
        dests
          .map((d) => {
            const age =
              d.age_s == null
                ? '<span class="warn">no estimate yet: Reno</span>'
                : `${num(d.age_s)} s${d.stale ? ' <span class="warn">stale: Reno</span>' : ''}`;
            return (
              `<tr><td>${esc(d.destination)} <small>${esc(d.origin)}</small></td><td>${mbit(d.a_measured_bps)}</td>` +
              `<td>${mbit(d.own_rate_bps)}</td><td>${mbit(d.a_written_bps)}</td><td>${mbit(d.own_rate_now_bps)}</td><td>${age}</td></tr>`
            );
          })
          .join('') +
        '<tr><td colspan="6"><small>rates in Mbit/s</small></td></tr>'
      : '<tr><td>no destinations: schedule a path ([[path]]) to feed the modes</td></tr>';
  }

  /** MPAT: hidden unless configured; why not when unavailable; else per aggregate its
   * members' weights, shares and rates. */
  function mpatPanel(m) {
    const el = $('#mpat');
    const state = !m.configured ? 'off' : m.available ? 'available' : 'unavailable';
    document.body.dataset.mpat = state;
    el.hidden = state === 'off';
    if (state === 'off') return;
    const aggs = m.aggregates || [];
    el.querySelector('.mstatus').innerHTML =
      state === 'available'
        ? `<span class="method">mgrp_mpat</span> registered · ${aggs.length} aggregate${aggs.length === 1 ? '' : 's'}`
        : `<span class="warn">unavailable: ${esc(m.unavailable_reason || '?')}</span>`;
    el.querySelector('.maggs').innerHTML = aggs.length
      ? '<tr><th>aggregate / member</th><th>weight</th><th>share</th><th>rate</th><th>flows</th></tr>' +
        aggs
          .map((a) => {
            const k = a.kernel || {};
            const head =
              `<tr><td><b>${esc(a.name)}</b> <small>${k.windows ?? '?'} open · C ${num(k.cwnd_pkts ?? 0)} pkts · ` +
              `${k.halvings ?? 0} halvings${k.refused ? ` · <span class="warn">${k.refused} refused (16 max)</span>` : ''}</small></td>` +
              `<td></td><td></td><td>${mbit(a.rate_bps)}</td><td></td></tr>`;
            const rows = (a.members || [])
              .map(
                (x) =>
                  `<tr><td>&nbsp;&nbsp;${esc(x.dst ?? '*')}:${esc(x.port ?? '*')}</td><td>${x.weight}</td>` +
                  `<td>${num(x.share * 100)} %</td><td>${mbit(x.rate_bps)}</td><td>${x.flows}</td></tr>`,
              )
              .join('');
            const warn = (a.warnings || [])
              .map((w) => `<tr><td colspan="5"><span class="warn">${esc(w)}</span></td></tr>`)
              .join('');
            return head + rows + warn;
          })
          .join('') +
        '<tr><td colspan="5"><small>rates in Mbit/s (acked bytes between reads)</small></td></tr>'
      : '<tr><td>no aggregates: create one with <code>mgrp mpat create</code> or POST /v1/mpat</td></tr>';
  }

  function waiting() {
    st.raw = {};
    st.latest = {};
    for (const m of Object.keys(METRICS)) {
      drawPlot(m);
      card(m);
    }
    const pending = st.schedules.map((s) => s.peer).join(', ');
    $('#card-schedule .sched').textContent = pending
      ? `waiting for the first session to ${pending}`
      : 'no paths: this agent has no estimates and no schedules';
    document.body.dataset.points = '0';
    document.body.dataset.state = st.error ? 'error' : 'waiting';
  }

  function fillSelector() {
    const sel = $('#path');
    const sched = new Set(st.schedules.map((s) => s.path));
    const paths = [...st.known.keys()].sort();
    const want = paths.join('\n');
    if (sel.dataset.paths !== want) {
      sel.dataset.paths = want;
      sel.innerHTML = paths
        .map((p) => `<option value="${esc(p)}">${esc(p)}${sched.has(p) ? '' : ' (not scheduled)'}</option>`)
        .join('');
    }
    sel.value = st.path || '';
    sel.disabled = paths.length < 2;
  }

  function setError(msg) {
    st.error = msg;
    const el = $('#error');
    el.textContent = msg ? `API error: ${msg}` : '';
    el.hidden = !msg;
    document.body.dataset.error = msg;
    if (msg) document.body.dataset.state = 'error';
    else if (document.body.dataset.state === 'error') {
      document.body.dataset.state = Number(document.body.dataset.points) > 0 ? 'live' : 'waiting';
    }
  }

  function status() {
    const el = $('#status');
    let cls;
    let text;
    if (st.error) {
      [cls, text] = ['down', st.error.startsWith('agent unreachable') ? 'agent unreachable' : 'API error'];
    } else if (st.sse === 'open') {
      [cls, text] = ['live', 'live · estimates pushed'];
    } else {
      [cls, text] = ['poll', `live · polling every ${POLL_ALONE_MS / 1000} s (event stream ${st.sse})`];
    }
    el.className = `status ${cls}`;
    el.textContent = text;
  }

  // ---- controls ---------------------------------------------------------------------------

  /** Keep path and window in the page's URL (with the token, if any), so a reload keeps them. */
  function remember() {
    const q = new URLSearchParams(location.search);
    if (st.path) q.set('path', st.path);
    q.set('window', st.win);
    history.replaceState(null, '', `${location.pathname}?${q}`);
  }

  function reset() {
    for (const p of Object.values(st.plots)) p.u.destroy();
    st.plots = {};
    st.raw = {};
    st.latest = {};
    st.spent = [];
    document.body.dataset.points = '0';
    remember();
    refresh();
  }

  $('#path').addEventListener('change', (e) => {
    st.path = e.target.value;
    closeEvents();
    reset();
  });

  for (const b of document.querySelectorAll('#window button')) {
    b.classList.toggle('on', b.dataset.win === st.win);
    b.addEventListener('click', () => {
      if (b.dataset.win === st.win) return;
      st.win = b.dataset.win;
      for (const o of document.querySelectorAll('#window button')) o.classList.toggle('on', o === b);
      reset();
    });
  }

  window.addEventListener('resize', () => {
    for (const [m, p] of Object.entries(st.plots)) {
      p.u.setSize({ width: $(`#plot-${m} .chart`).clientWidth, height: p.u.height });
    }
  });

  if (TOKEN) {
    $('#link-spec').href = apiUrl('/v1/openapi.yaml').toString();
    $('#link-metrics').href = apiUrl('/metrics').toString();
  }

  refresh();
})();
