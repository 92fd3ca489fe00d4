// h3edge dashboard: polls /api/v1/stats and /api/v1/upstreams once a second and draws them. No build step, no
// dependencies. Counters arrive cumulative; rates are differences between polls.
'use strict';

const TOKEN_KEY = 'h3edge-admin-token';
const WINDOW = 120; // seconds of history in the charts
const PROTOS = ['h3', 'h2', 'h1'];
const COLORS = { h3: '#2563eb', h2: '#059669', h1: '#d97706', allowed: '#059669', denied: '#dc2626', shadow: '#7c3aed' };

// A token can be handed over in the fragment (#token=…), which never reaches a server
// or a log; it is kept for this tab only.
(function takeToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
})();

function headers() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: 'Bearer ' + t } : {};
}

const $ = (id) => document.getElementById(id);

function setText(id, v) {
  const el = $(id);
  if (el && el.textContent !== String(v)) el.textContent = v;
}

function fmt(n) {
  return Number(n).toLocaleString('en-US');
}

function fmtRate(r) {
  if (!isFinite(r)) return '–';
  return r >= 100 ? fmt(Math.round(r)) : r.toFixed(1);
}

function setStatus(text, error) {
  const el = $('status');
  el.textContent = text;
  el.classList.toggle('error', !!error);
}

let prev = null;
const series = { h3: [], h2: [], h1: [], allowed: [], denied: [], shadow: [] };

function push(name, v) {
  const s = series[name];
  s.push(v);
  if (s.length > WINDOW) s.shift();
}

function rate(cur, old, dt) {
  return dt > 0 ? Math.max(0, cur - old) / dt : 0;
}

function sumDecisions(s) {
  const t = { allowed: 0, denied: 0, shadow: 0 };
  for (const d of s.decisions) {
    t.allowed += d.allowed;
    if (d.shadow) t.shadow += d.denied; else t.denied += d.denied;
  }
  return t;
}

function render(s) {
  const now = new Date(s.time).getTime();
  const dt = prev ? (now - new Date(prev.time).getTime()) / 1000 : 0;

  let total429 = 0, prev429 = 0;
  for (const p of PROTOS) {
    const c = s.requests[p];
    setText('total-' + p, fmt(c.total));
    total429 += c['429'];
    if (prev) {
      const r = rate(c.total, prev.requests[p].total, dt);
      setText('rate-' + p, fmtRate(r));
      push(p, r);
      prev429 += prev.requests[p]['429'];
    }
  }
  setText('total-429', fmt(total429));
  if (prev) setText('rate-429', fmtRate(rate(total429, prev429, dt)));

  const dec = sumDecisions(s);
  if (prev) {
    const pd = sumDecisions(prev);
    push('allowed', rate(dec.allowed, pd.allowed, dt));
    push('denied', rate(dec.denied, pd.denied, dt));
    push('shadow', rate(dec.shadow, pd.shadow, dt));
  }

  setText('inflight', fmt(s.inflight));
  setText('tracked', fmt(s.transport.tracked_sources));
  setText('store-state', s.store.state === 'ok' ? 'healthy' : 'breaker open');
  $('store-state').classList.toggle('error', s.store.state !== 'ok');
  setText('store-kind', s.store.kind === 'local' ? 'in memory' : 'shared (Redis)');
  setText('store-errors', fmt(s.store.errors));
  setText('bans-active', s.bans.available ? fmt(s.bans.active) : 'n/a');
  setText('bans-total', s.bans.available ? fmt(s.bans.total) : 'n/a');

  renderDecisions(s, dt);
  renderTop(s.top);
  renderBans(s.bans);
  renderTransport(s.transport);
  drawChart($('chart-requests'), PROTOS.map((p) => ({ label: p, color: COLORS[p], data: series[p] })));
  drawChart($('chart-decisions'), ['allowed', 'denied', 'shadow'].map((k) => ({ label: k === 'shadow' ? 'shadow denied' : k, color: COLORS[k], data: series[k] })));

  prev = s;
  setStatus('live · updated ' + new Date(s.time).toLocaleTimeString('en-GB'));
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fillTable(id, rows, empty, cols) {
  const tbody = $(id).tBodies[0];
  const frag = document.createDocumentFragment();
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    cell(tr, empty, 'muted').colSpan = cols;
    frag.appendChild(tr);
  }
  for (const r of rows) frag.appendChild(r);
  tbody.replaceChildren(frag);
}

function renderDecisions(s, dt) {
  const old = new Map((prev ? prev.decisions : []).map((d) => [d.policy, d]));
  const rows = s.decisions.map((d) => {
    const tr = document.createElement('tr');
    tr.dataset.policy = d.policy;
    cell(tr, d.policy);
    cell(tr, d.shadow ? 'shadow' : 'enforce');
    cell(tr, fmt(d.allowed), 'num');
    cell(tr, fmt(d.denied), 'num');
    cell(tr, fmt(d.vetoed), 'num');
    cell(tr, fmt(d.failed_open), 'num');
    cell(tr, fmt(d.failed_closed), 'num');
    const o = old.get(d.policy);
    cell(tr, o ? fmtRate(rate(d.denied, o.denied, dt)) : '–', 'num');
    return tr;
  });
  fillTable('decisions', rows, 'no policies', 8);
}

function renderTop(top) {
  setText('source-sample', top.source_sample > 1 ? '(sampled 1 in ' + top.source_sample + ', fading by half every ' + top.half_life + ')' : '');
  fillTable('top-keys', top.keys.map((k) => {
    const tr = document.createElement('tr');
    const td = cell(tr, '');
    const code = document.createElement('code');
    code.textContent = k.key.slice(0, 16) + '…';
    code.title = k.key;
    td.appendChild(code);
    cell(tr, k.pk);
    cell(tr, fmt(k.count), 'num');
    return tr;
  }), 'no client keys yet', 3);
  fillTable('top-sources', top.sources.map((src) => {
    const tr = document.createElement('tr');
    cell(tr, src.prefix);
    cell(tr, fmt(src.count), 'num');
    return tr;
  }), 'no sources yet', 2);
}

function renderBans(bans) {
  $('bans-absent').hidden = bans.available;
  $('bans').hidden = !bans.available;
  if (!bans.available) return;
  fillTable('bans', bans.list.map((b) => {
    const tr = document.createElement('tr');
    tr.dataset.prefix = b.prefix;
    cell(tr, b.prefix);
    cell(tr, b.reason);
    cell(tr, new Date(b.until).toLocaleString('en-GB'));
    cell(tr, b.strikes ? String(b.strikes) : '');
    const btn = document.createElement('button');
    btn.className = 'unban';
    btn.dataset.prefix = b.prefix;
    btn.textContent = 'unban';
    btn.addEventListener('click', () => unban(b.prefix, btn));
    cell(tr, '').appendChild(btn);
    return tr;
  }), 'nobody is banned', 5);
}

function renderTransport(t) {
  setText('dropped', fmt(t.dropped_datagrams));
  setText('refused-conn-h3', fmt(t.refused_connections.h3 || 0));
  setText('refused-conn-tcp', fmt(t.refused_connections.tcp || 0));
  setText('refused-streams', PROTOS.map((p) => fmt(t.refused_streams[p] || 0)).join(' / '));
  setText('open-conns', fmt(t.open_connections));
}

// renderUpstreams fills the upstream panel from GET /api/v1/upstreams: one row per
// target, its health as the pool sees it, requests in flight, recent p99, and its
// responses so far. null: the endpoint is not there (or failed); the note says so.
function renderUpstreams(u) {
  if (!u) {
    setText('upstreams-note', '(not available)');
    fillTable('upstreams', [], 'no upstreams', 9);
    return;
  }
  setText('upstreams-note', u.upstreams.length === 0 ? '(the built-in demo origin serves)' : '');
  const rows = [];
  for (const pool of u.upstreams) {
    for (const tg of pool.targets) {
      const tr = document.createElement('tr');
      tr.dataset.upstream = pool.name;
      tr.dataset.target = tg.url;
      tr.dataset.state = tg.state;
      cell(tr, pool.name + ' (' + pool.balance.replace('_', ' ') + ')');
      cell(tr, '').appendChild(document.createElement('code')).textContent = tg.url;
      cell(tr, fmt(tg.weight), 'num');
      const st = document.createElement('span');
      st.className = 'state state-' + tg.state;
      st.textContent = tg.state;
      cell(tr, '').appendChild(st);
      cell(tr, fmt(tg.in_flight), 'num');
      cell(tr, tg.p99_ms > 0 ? tg.p99_ms.toFixed(tg.p99_ms < 10 ? 2 : 0) + ' ms' : '–', 'num');
      let total = 0, errors5xx = 0;
      for (const [code, n] of Object.entries(tg.codes)) {
        total += n;
        if (code >= 500) errors5xx += n;
      }
      cell(tr, fmt(total), 'num');
      cell(tr, fmt(errors5xx), 'num');
      cell(tr, fmt(tg.errors), 'num');
      rows.push(tr);
    }
  }
  fillTable('upstreams', rows, 'no upstreams', 9);
}

async function unban(prefix, btn) {
  btn.disabled = true;
  // Keep the prefix's slash as a path separator; the API takes the rest of the path.
  const path = '/api/v1/bans/' + prefix.split('/').map(encodeURIComponent).join('/');
  try {
    const r = await fetch(path, { method: 'DELETE', headers: headers() });
    if (r.status !== 204 && r.status !== 404) throw new Error('HTTP ' + r.status);
    const row = btn.closest('tr');
    if (row) row.remove();
    setStatus('unbanned ' + prefix);
    poll();
  } catch (e) {
    btn.disabled = false;
    setStatus('unban ' + prefix + ' failed: ' + e.message, true);
  }
}

function drawChart(canvas, lines) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const pad = { l: 44, r: 8, t: 18, b: 14 };
  let top = 1;
  for (const l of lines) for (const v of l.data) top = Math.max(top, v);
  top = niceCeil(top);
  ctx.font = '11px system-ui, sans-serif';
  ctx.strokeStyle = '#e3e6ec';
  ctx.fillStyle = '#6b7280';
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + (h - pad.t - pad.b) * (1 - i / 4);
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    ctx.fillText(fmtRate(top * i / 4), 2, y + 4);
  }
  const xs = (w - pad.l - pad.r) / (WINDOW - 1);
  let lx = pad.l;
  for (const l of lines) {
    ctx.strokeStyle = l.color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    const off = WINDOW - l.data.length;
    l.data.forEach((v, i) => {
      const x = pad.l + (off + i) * xs;
      const y = pad.t + (h - pad.t - pad.b) * (1 - v / top);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = l.color;
    if (l.data.length > 0) { // the latest value as a dot, visible from the first poll
      const v = l.data[l.data.length - 1];
      ctx.beginPath();
      ctx.arc(pad.l + (WINDOW - 1) * xs, pad.t + (h - pad.t - pad.b) * (1 - v / top), 2.5, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.fillText(l.label, lx, 11);
    lx += ctx.measureText(l.label).width + 14;
  }
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

let inFlight = false;
async function poll() {
  if (inFlight) return;
  inFlight = true;
  try {
    const [r, ru] = await Promise.all([
      fetch('/api/v1/stats', { headers: headers(), cache: 'no-store' }),
      fetch('/api/v1/upstreams', { headers: headers(), cache: 'no-store' }).catch(() => null),
    ]);
    if (r.status === 401) {
      $('token-form').hidden = false;
      setStatus('the admin API wants its token', true);
      return;
    }
    if (!r.ok) throw new Error('HTTP ' + r.status);
    render(await r.json());
    renderUpstreams(ru && ru.ok ? await ru.json() : null);
  } catch (e) {
    setStatus('no data: ' + e.message, true);
  } finally {
    inFlight = false;
  }
}

$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value);
  $('token').value = '';
  $('token-form').hidden = true;
  poll();
});

poll();
setInterval(poll, 1000);
