// graphrun board's page: reads the /api/ answers of `graphrun board` and
// draws the runs of a log directory. Live: /api/version answers when the
// run database changes (a long poll), and the page then reads it again.
// ?run=ID picks the run shown below the curves; ?until=done stops
// watching once no run is running (for snapshots and tests).
'use strict';

const params = new URLSearchParams(location.search);
const untilDone = params.get('until') === 'done';
let selected = params.has('run') ? Number(params.get('run')) : null;
let runs = [];
let version = '';
const charts = {};
const histCharts = {};
const drawn = {graph: null, nodes: null};
const colours = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#17becf'];
const internal = ['lr', 'steps_per_sec', 'examples_per_sec', 'epoch_seconds'];

const $ = (sel) => document.querySelector(sel);
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

async function get(url, as) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(url + ': ' + r.status + ' ' + (await r.text()));
  return as === 'text' ? r.text() : r.json();
}

function setStatus(text) { $('#status').textContent = text; }

function renderRuns() {
  const body = $('#run-table tbody');
  body.replaceChildren();
  for (const r of runs) {
    const best = r.best_metric ? `${r.best_metric} ${Number(r.best_value).toPrecision(4)} (epoch ${r.best_epoch})` : '';
    const tr = el('tr', {'data-run': r.id, 'data-status': r.status},
                  el('td', {}, String(r.id)),
                  el('td', {}, new Date(r.started * 1000).toLocaleString()),
                  el('td', {class: 'status-' + r.status}, r.status),
                  el('td', {}, `${r.epochs_done}/${r.epochs}`),
                  el('td', {}, best),
                  el('td', {class: 'command'}, r.command));
    if (r.id === selected) tr.classList.add('selected');
    tr.addEventListener('click', () => { selected = r.id; drawn.graph = drawn.nodes = null; refresh(); });
    body.append(tr);
  }
  for (const w of document.querySelectorAll('.which')) w.textContent = selected != null ? `(run ${selected})` : '';
}

// One chart per family: loss shows the runs' loss and val_loss.
function family(tag) { return tag.startsWith('val_') ? tag.slice(4) : tag; }

function renderScalars(series) {
  const fams = new Map();
  for (const r of runs)
    for (const [tag, epoch, step, wall, value] of series[r.id]) {
      const f = family(tag);
      if (!fams.has(f)) fams.set(f, new Map());
      const key = r.id + '\u0000' + tag;
      if (!fams.get(f).has(key)) fams.get(f).set(key, {run: r.id, tag, points: []});
      fams.get(f).get(key).points.push({x: epoch, y: value, step});
    }
  const order = [...fams.keys()].sort((a, b) =>
    (internal.includes(a) - internal.includes(b)) || a.localeCompare(b));
  for (const f of order) {
    let box = document.querySelector(`.chart[data-family="${CSS.escape(f)}"]`);
    if (!box) {
      box = el('div', {class: 'chart', 'data-family': f}, el('h3', {}, f), el('canvas'),
               el('details', {class: 'points'}, el('summary', {}, 'points'), el('table')));
      $('#charts').append(box);
    }
    const lines = [...fams.get(f).values()];
    const table = box.querySelector('table');
    table.replaceChildren(el('tr', {}, el('th', {}, 'run'), el('th', {}, 'tag'),
                             el('th', {}, 'epoch'), el('th', {}, 'step'), el('th', {}, 'value')));
    for (const l of lines)
      for (const p of l.points)
        table.append(el('tr', {class: 'point', 'data-run': l.run, 'data-tag': l.tag, 'data-epoch': p.x},
                        el('td', {}, String(l.run)), el('td', {}, l.tag), el('td', {}, String(p.x)),
                        el('td', {}, String(p.step)), el('td', {}, p.y === null ? 'NaN' : String(p.y))));
    box.setAttribute('data-lines', lines.length);
    if (typeof Chart === 'undefined') continue;
    const datasets = lines.map((l) => {
      const c = colours[runs.findIndex((r) => r.id === l.run) % colours.length];
      return {label: `run ${l.run} ${l.tag}`, data: l.points, borderColor: c, backgroundColor: c,
              borderDash: l.tag.startsWith('val_') ? [6, 3] : [], pointRadius: 2, spanGaps: false};
    });
    if (!charts[f])
      charts[f] = new Chart(box.querySelector('canvas'), {
        type: 'line', data: {datasets},
        options: {animation: false, responsive: false, parsing: true,
                  scales: {x: {type: 'linear', title: {display: true, text: 'epoch'}}},
                  plugins: {legend: {labels: {boxWidth: 12}}}}});
    else {
      charts[f].data.datasets = datasets;
      charts[f].update('none');
    }
  }
}

function renderHistograms(rows) {
  const byTag = new Map();
  for (const [tag, epoch, min, max, count, buckets] of rows) {
    if (!byTag.has(tag)) byTag.set(tag, []);
    byTag.get(tag).push({epoch, min, max, count, buckets});
  }
  const box = $('#hist-charts');
  for (const k of Object.keys(histCharts)) if (!byTag.has(k)) { histCharts[k].destroy(); delete histCharts[k]; }
  box.replaceChildren();
  for (const [tag, hs] of [...byTag].slice(0, 16)) {
    const div = el('div', {class: 'chart', 'data-histogram': tag, 'data-epochs': hs.length},
                   el('h3', {}, tag), el('canvas'));
    box.append(div);
    if (typeof Chart === 'undefined') continue;
    const datasets = hs.map((h, i) => {
      const w = (h.max - h.min) / h.buckets.length;
      const shade = Math.round(200 - 170 * (i + 1) / hs.length);
      return {label: `epoch ${h.epoch}`, pointRadius: 0, borderWidth: 1,
              borderColor: `rgb(${shade},${shade},255)`,
              data: h.buckets.map((c, b) => ({x: h.min + (b + 0.5) * (w || 1), y: c}))};
    });
    if (histCharts[tag]) histCharts[tag].destroy();
    histCharts[tag] = new Chart(div.querySelector('canvas'), {
      type: 'line', data: {datasets},
      options: {animation: false, responsive: false,
                scales: {x: {type: 'linear', title: {display: true, text: 'value'}},
                         y: {title: {display: true, text: 'count'}}},
                plugins: {legend: {display: false}}}});
  }
}

async function renderGraph() {
  if (drawn.graph === selected) return;
  const box = $('#graph-svg');
  try {
    const text = await get('/api/graph.svg?run=' + selected, 'text');
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    box.replaceChildren(document.importNode(doc.documentElement, true));
    drawn.graph = selected;
  } catch (e) {
    box.replaceChildren(el('p', {class: 'hint'}, String(e.message)));
  }
}

async function renderPlacement() {
  if (drawn.nodes === selected) return;
  const nodes = await get('/api/nodes?run=' + selected);
  const devs = new Map();
  const body = $('#node-table tbody');
  body.replaceChildren();
  for (const [name, op, device] of nodes) {
    const d = device || '(any)';
    if (!devs.has(d)) devs.set(d, {n: 0, ops: new Map()});
    const e = devs.get(d);
    e.n++;
    e.ops.set(op, (e.ops.get(op) || 0) + 1);
    body.append(el('tr', {}, el('td', {}, name), el('td', {}, op), el('td', {}, d)));
  }
  const dbody = $('#device-table tbody');
  dbody.replaceChildren();
  for (const [d, e] of devs) {
    const ops = [...e.ops].sort((a, b) => b[1] - a[1]).slice(0, 8).map(([o, n]) => `${o} ${n}`).join(', ');
    dbody.append(el('tr', {'data-device': d, 'data-nodes': e.n}, el('td', {}, d),
                    el('td', {}, String(e.n)), el('td', {}, ops)));
  }
  drawn.nodes = selected;
}

function renderTimeline(trace) {
  const events = (trace.traceEvents || []).filter((e) => e.ph === 'X');
  const lanes = new Map();
  for (const e of trace.traceEvents || [])
    if (e.ph === 'M' && e.name === 'process_name') lanes.set(e.pid, e.args.name);
  for (const e of events) if (!lanes.has(e.pid)) lanes.set(e.pid, 'device ' + e.pid);
  const end = Math.max(1, ...events.map((e) => e.ts + e.dur));
  const W = 1100, left = 10, laneH = 26, ns = 'http://www.w3.org/2000/svg';
  const pids = [...lanes.keys()].sort((a, b) => a - b);
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', W + 2 * left);
  svg.setAttribute('height', pids.length * (laneH + 16) + 20);
  svg.setAttribute('data-events', events.length);
  pids.forEach((pid, i) => {
    const label = document.createElementNS(ns, 'text');
    label.setAttribute('x', left);
    label.setAttribute('y', i * (laneH + 16) + 12);
    label.setAttribute('font-size', '11');
    label.textContent = lanes.get(pid);
    svg.append(label);
  });
  for (const e of events) {
    const i = pids.indexOf(e.pid);
    const r = document.createElementNS(ns, 'rect');
    r.setAttribute('x', left + (W * e.ts) / end);
    r.setAttribute('y', i * (laneH + 16) + 16);
    r.setAttribute('width', Math.max(1, (W * e.dur) / end));
    r.setAttribute('height', laneH);
    r.setAttribute('fill', colours[Math.abs([...e.cat].reduce((h, c) => h * 31 + c.charCodeAt(0), 7)) % colours.length]);
    r.setAttribute('class', 'node-run');
    const t = document.createElementNS(ns, 'title');
    t.textContent = `${e.name} (${e.cat}) ${e.dur.toFixed(1)} µs`;
    r.append(t);
    svg.append(r);
  }
  $('#timeline-svg').replaceChildren(events.length ? svg : el('p', {class: 'hint'}, 'no trace yet'));
  const body = $('#slowest tbody');
  body.replaceChildren();
  for (const e of [...events].sort((a, b) => b.dur - a.dur).slice(0, 10))
    body.append(el('tr', {}, el('td', {}, e.name), el('td', {}, e.cat), el('td', {}, lanes.get(e.pid)),
                   el('td', {}, e.dur.toFixed(1))));
}

// A line per refresh, read by the suite (tests/unit/test_board.c).
function logUpdate(series) {
  for (const r of runs) {
    const epochs = new Set(series[r.id].map((row) => row[1])).size;
    $('#updates').append(el('li', {'data-run': r.id, 'data-status': r.status, 'data-epochs': epochs},
                            `run ${r.id}: ${r.status}, ${epochs} epochs`));
  }
}

async function refresh() {
  runs = await get('/api/runs');
  if (selected === null || !runs.some((r) => r.id === selected))
    selected = runs.length ? runs[runs.length - 1].id : null;
  renderRuns();
  const series = {};
  for (const r of runs) series[r.id] = await get('/api/scalars?run=' + r.id);
  renderScalars(series);
  if (selected !== null) {
    renderHistograms(await get('/api/histograms?run=' + selected));
    await renderGraph();
    await renderPlacement();
    renderTimeline(await get('/api/trace?run=' + selected));
  }
  logUpdate(series);
  const live = runs.filter((r) => r.status === 'running').length;
  setStatus(`${runs.length} run${runs.length === 1 ? '' : 's'}, ${live} running; updated ${new Date().toLocaleTimeString()}`);
}

async function watch() {
  $('#dir').textContent = await get('/api/dir', 'text');
  if (typeof Chart === 'undefined') setStatus('Chart.js did not load: curves are listed as points only');
  for (;;) {
    try {
      const v = await get('/api/version?since=' + encodeURIComponent(version));
      if (v.version !== version) {
        version = v.version;
        await refresh();
      }
      if (untilDone && runs.length && runs.every((r) => r.status !== 'running')) {
        document.body.setAttribute('data-done', 'true');
        return;
      }
    } catch (e) {
      setStatus(String(e.message || e));
      await sleep(2000);
    }
  }
}

watch();
