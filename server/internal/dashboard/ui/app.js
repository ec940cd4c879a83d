// The fenced dashboard.
//
// Leases come from GET /v1/events (server-sent events): a snapshot, then one
// event per transition. Renewals are not transitions, so the remaining time
// of the leases already shown is refreshed from the List RPC every few
// seconds and counted down here in between. Counters come from GET
// /v1/stats. Stale rejections that resources reported come from GET
// /v1/rejections every few seconds and are shown on the epoch whose token
// was refused. All text from the server is inserted with textContent: keys
// and owners are whatever clients sent.
'use strict';

(() => {
  const STATS_EVERY_MS = 2000;
  const REJECTIONS_EVERY_MS = 2000;
  const MAX_REJECTIONS = 20; // most recent rejections listed
  const LIST_EVERY_MS = 3000;
  const TICK_MS = 250;
  const RETRY_MS = 2000;
  const MAX_KEYS = 100; // keys kept in the timeline
  const MAX_EPOCHS = 20; // epochs kept per key
  const MIN_SPAN_MS = 30e3; // shortest time window of the timeline bars
  const MAX_SPAN_MS = 10 * 60e3; // longest
  const LOW_FRACTION = 0.2; // bar turns orange below this share of the TTL

  const $ = (id) => document.getElementById(id);
  const now = () => performance.now();
  const wall = (t) => new Date(performance.timeOrigin + t);
  const numFmt = new Intl.NumberFormat('en-US');

  const state = {
    prefix: '',
    source: null, // EventSource
    retry: 0, // timer of a scheduled reconnect
    live: false,
    revision: 0,
    leases: new Map(), // key -> lease under the current prefix, with .deadline
    rows: new Map(), // key -> <tr>
    keys: new Map(), // key -> timeline entry {key, epochs, touched, el}
    rejected: new Map(), // key -> token -> [rejection], from /v1/rejections
    rejectionsSeen: '', // the last answer, to skip unchanged ones
    opened: now(),
  };

  // ---- leases -------------------------------------------------------------

  // Proto3 JSON leaves out empty fields and writes 64-bit numbers as
  // strings; tokens stay strings so that no precision is lost. The server
  // never shows lease IDs here: a key's token names its ownership epoch, as
  // every grant of a key gets a larger token than the one before.
  function normLease(raw) {
    return {
      key: String(raw.key || ''),
      owner: String(raw.owner || ''),
      token: String(raw.token ?? '0'),
      ttlMs: Number(raw.ttlMs || 0),
      remainingMs: Number(raw.remainingMs || 0),
    };
  }

  function inPrefix(key) {
    return key.startsWith(state.prefix);
  }

  function setLease(l, t, fresh) {
    l.deadline = t + l.remainingMs;
    state.leases.set(l.key, l);
    upsertRow(l, fresh);
  }

  function removeLease(key, token) {
    const cur = state.leases.get(key);
    if (!cur || (token && cur.token !== token)) return;
    state.leases.delete(key);
    const tr = state.rows.get(key);
    if (tr) {
      tr.remove();
      state.rows.delete(key);
    }
  }

  function clearLeases() {
    state.leases.clear();
    for (const tr of state.rows.values()) tr.remove();
    state.rows.clear();
  }

  function cell(tag, cls, label) {
    const c = document.createElement(tag);
    c.className = cls;
    c.setAttribute('role', tag === 'th' ? 'rowheader' : 'cell');
    if (tag === 'th') c.scope = 'row';
    if (label) c.dataset.label = label;
    return c;
  }

  function upsertRow(l, fresh) {
    let tr = state.rows.get(l.key);
    if (!tr) {
      tr = document.createElement('tr');
      tr.setAttribute('role', 'row');
      tr.dataset.key = l.key;
      const key = cell('th', 'key');
      const owner = cell('td', 'owner', 'owner');
      const token = cell('td', 'token', 'token');
      const expires = cell('td', 'expires', 'expires in');
      const left = document.createElement('span');
      left.className = 'left';
      const bar = document.createElement('span');
      bar.className = 'bar';
      bar.setAttribute('aria-hidden', 'true');
      bar.append(document.createElement('span'));
      expires.append(left, bar);
      tr.append(key, owner, token, expires);
      key.textContent = l.key;
      insertSorted(tr, l.key);
      state.rows.set(l.key, tr);
    }
    tr.dataset.token = l.token;
    tr.dataset.owner = l.owner;
    tr.querySelector('.owner').textContent = l.owner;
    tr.querySelector('.token').textContent = l.token;
    if (fresh) {
      tr.classList.remove('fresh');
      void tr.offsetWidth; // restart the highlight
      tr.classList.add('fresh');
    }
    tickRow(tr, l, now());
  }

  // Rows are kept in key order, as List returns them.
  function insertSorted(tr, key) {
    const body = $('leases');
    for (const other of body.children) {
      if (other.dataset.key > key) {
        body.insertBefore(tr, other);
        return;
      }
    }
    body.append(tr);
  }

  function tickRow(tr, l, t) {
    const left = Math.max(0, l.deadline - t);
    const text = left > 0 ? fmtLeft(left) : 'due';
    const span = tr.querySelector('.left');
    if (span.textContent !== text) span.textContent = text;
    const share = l.ttlMs > 0 ? Math.min(1, left / l.ttlMs) : 0;
    tr.querySelector('.bar > span').style.width = (share * 100).toFixed(1) + '%';
    tr.classList.toggle('low', share < LOW_FRACTION);
    tr.classList.toggle('due', left <= 0);
    tr.title = left > 0 ? '' : 'the server has not reported this lease expired yet';
  }

  function fmtLeft(ms) {
    if (ms < 10e3) return (ms / 1e3).toFixed(1) + ' s';
    return fmtDuration(ms);
  }

  function fmtDuration(ms) {
    const s = Math.floor(ms / 1e3);
    if (ms < 1e3) return Math.round(ms) + ' ms';
    if (s < 10) return (ms / 1e3).toFixed(1) + ' s';
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + String(s % 60).padStart(2, '0') + ' s';
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + String(m % 60).padStart(2, '0') + ' min';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }

  function fmtClock(t) {
    return wall(t).toLocaleTimeString([], { hour12: false });
  }

  // ---- timeline -----------------------------------------------------------

  function timelineKey(key, t) {
    let k = state.keys.get(key);
    if (!k) {
      k = { key, epochs: [], touched: t, el: null };
      state.keys.set(key, k);
    }
    k.touched = t;
    k.dirty = true;
    return k;
  }

  const open = (e) => e && (e.status === 'current' || e.status === 'unwatched');

  // startEpoch records that lease l is current. seen is true when the grant
  // itself was observed (an ACQUIRED event) rather than found in a snapshot.
  function startEpoch(l, t, seen) {
    const k = timelineKey(l.key, t);
    const last = k.epochs[k.epochs.length - 1];
    if (last && last.token === l.token) {
      if (last.status === 'unwatched') last.status = 'current';
      return;
    }
    if (open(last)) endEpoch(last, 'unknown', t);
    k.epochs.push({
      token: l.token, owner: l.owner,
      start: seen ? t : null, end: null, status: 'current',
      takeover: seen && !!last && last.status === 'expired',
    });
    if (k.epochs.length > MAX_EPOCHS) k.epochs.shift();
    prune();
  }

  function finishEpoch(l, status, t) {
    const k = timelineKey(l.key, t);
    let e = null;
    for (let i = k.epochs.length - 1; i >= 0 && !e; i--) {
      if (k.epochs[i].token === l.token) e = k.epochs[i];
    }
    if (!e) {
      e = { token: l.token, owner: l.owner, start: null, end: null, status, takeover: false };
      k.epochs.push(e);
      if (k.epochs.length > MAX_EPOCHS) k.epochs.shift();
    }
    endEpoch(e, status, t);
  }

  function endEpoch(e, status, t) {
    e.status = status;
    e.end = t;
  }

  // prune forgets the least recently active keys that hold no lease.
  function prune() {
    if (state.keys.size <= MAX_KEYS) return;
    const idle = [...state.keys.values()]
      .filter((k) => !open(k.epochs[k.epochs.length - 1]))
      .sort((a, b) => a.touched - b.touched);
    for (const k of idle.slice(0, state.keys.size - MAX_KEYS)) {
      if (k.el) k.el.remove();
      state.keys.delete(k.key);
    }
  }

  const statusText = {
    current: 'current',
    released: 'released',
    expired: 'expired',
    unknown: 'ended unseen',
    unwatched: 'not watched',
  };

  function renderTimeline(t) {
    const box = $('timeline');
    const ordered = [...state.keys.values()].sort((a, b) => b.touched - a.touched);
    let shown = 0;
    ordered.forEach((k, i) => {
      if (!k.el) k.el = buildKey(k);
      if (k.dirty) {
        renderEpochs(k);
        k.dirty = false;
      }
      if (box.children[i] !== k.el) box.insertBefore(k.el, box.children[i] || null);
      k.el.hidden = !inPrefix(k.key);
      if (!k.el.hidden) shown++;
    });
    $('timeline-empty').hidden = shown > 0;
    tickTimeline(t);
  }

  function buildKey(k) {
    const sec = document.createElement('section');
    sec.className = 'tl-key';
    sec.dataset.key = k.key;
    const h = document.createElement('h3');
    h.textContent = k.key;
    const axis = document.createElement('div');
    axis.className = 'axis';
    axis.setAttribute('aria-hidden', 'true');
    const list = document.createElement('ol');
    list.className = 'epochs';
    list.setAttribute('aria-label', 'epochs of ' + k.key + ', oldest first');
    sec.append(h, axis, list);
    return sec;
  }

  function renderEpochs(k) {
    const axis = k.el.querySelector('.axis');
    const list = k.el.querySelector('.epochs');
    axis.replaceChildren();
    list.replaceChildren();
    for (const e of k.epochs) {
      const seg = document.createElement('span');
      seg.className = 'seg ' + e.status;
      e.seg = seg;
      axis.append(seg);

      const li = document.createElement('li');
      li.className = 'epoch';
      li.dataset.key = k.key;
      li.dataset.token = e.token;
      li.dataset.status = e.status;
      li.dataset.takeover = String(e.takeover);
      const tok = document.createElement('span');
      tok.className = 'tok';
      tok.textContent = '#' + e.token;
      tok.title = 'fencing token';
      const own = document.createElement('span');
      own.className = 'own';
      own.textContent = e.owner || '(no owner)';
      const how = document.createElement('span');
      how.className = 'how';
      how.textContent = statusText[e.status] || e.status;
      li.append(tok, own, how);
      for (const r of state.rejected.get(k.key)?.get(e.token) || []) {
        const rej = document.createElement('span');
        rej.className = 'rej';
        rej.dataset.resource = r.resource;
        rej.textContent = describeRejection(r);
        rej.title = 'a resource refused a write made with this epoch\'s token: fencing at work';
        li.append(rej);
      }
      if (e.takeover) {
        const b = document.createElement('span');
        b.className = 'badge';
        b.textContent = 'takeover';
        b.title = 'the previous lease of this key expired instead of being released';
        li.append(b);
      }
      const when = document.createElement('span');
      when.className = 'when';
      e.when = when;
      li.append(when);
      list.append(li);
    }
  }

  function timelineSpan(t) {
    return Math.min(MAX_SPAN_MS, Math.max(MIN_SPAN_MS, t - state.opened));
  }

  // tickTimeline moves the bars along as time passes and updates the
  // durations of epochs still open.
  function tickTimeline(t) {
    const span = timelineSpan(t);
    const from = t - span;
    const spanText = t - state.opened <= span ? 'the time since the page loaded' : 'the last ' + fmtDuration(span);
    if ($('span').textContent !== spanText) $('span').textContent = spanText;
    for (const k of state.keys.values()) {
      if (!k.el || k.el.hidden) continue;
      for (const e of k.epochs) {
        if (!e.seg) continue;
        const a = Math.max(e.start ?? state.opened, from);
        const b = e.end ?? t;
        if (b < from) {
          e.seg.hidden = true;
        } else {
          e.seg.hidden = false;
          e.seg.style.left = (((a - from) / span) * 100).toFixed(2) + '%';
          e.seg.style.width = (((b - a) / span) * 100).toFixed(2) + '%';
        }
        const text = whenText(e, t);
        if (e.when.textContent !== text) e.when.textContent = text;
      }
    }
  }

  function whenText(e, t) {
    if (e.start == null) {
      return e.end == null ? 'held since before this view' : 'until ' + fmtClock(e.end);
    }
    const held = (e.end ?? t) - e.start;
    if (e.end == null) return 'since ' + fmtClock(e.start) + ', ' + fmtDuration(held);
    return fmtClock(e.start) + ', held ' + fmtDuration(held);
  }

  // ---- the event stream -----------------------------------------------------

  function setConn(s, text) {
    const el = $('conn');
    el.dataset.state = s;
    el.textContent = text;
    state.live = s === 'live';
  }

  function connect() {
    clearTimeout(state.retry);
    if (state.source) state.source.close();
    const url = 'v1/events' + (state.prefix ? '?prefix=' + encodeURIComponent(state.prefix) : '');
    const src = new EventSource(url);
    state.source = src;
    setConn('connecting', 'connecting…');
    src.addEventListener('snapshot', (m) => {
      if (src !== state.source) return;
      applySnapshot(JSON.parse(m.data));
      setConn('live', 'live');
      const el = $('conn');
      el.dataset.snapshots = String(Number(el.dataset.snapshots || 0) + 1);
    });
    src.addEventListener('lease', (m) => {
      if (src !== state.source) return;
      applyEvent(JSON.parse(m.data));
    });
    // The server fell behind with this watcher; start over from a snapshot.
    src.addEventListener('resync', () => {
      if (src === state.source) connect();
    });
    src.onerror = () => {
      if (src !== state.source) return;
      if (src.readyState === EventSource.CLOSED) {
        setConn('offline', 'disconnected, retrying…');
        state.retry = setTimeout(connect, RETRY_MS);
      } else {
        setConn('connecting', 'reconnecting…');
      }
    };
  }

  function applySnapshot(snap) {
    const t = now();
    state.revision = Number(snap.revision) || 0;
    const seen = new Map();
    for (const raw of snap.leases || []) {
      const l = normLease(raw);
      seen.set(l.key, l);
    }
    // Whatever ended while this page was not connected ended unseen.
    for (const [key, l] of state.leases) {
      const s = seen.get(key);
      if (!s || s.token !== l.token) removeLease(key);
    }
    for (const k of state.keys.values()) {
      const last = k.epochs[k.epochs.length - 1];
      if (!open(last)) continue;
      if (!inPrefix(k.key)) {
        if (last.status === 'current') {
          last.status = 'unwatched';
          k.dirty = true;
        }
        continue;
      }
      const s = seen.get(k.key);
      if (!s || s.token !== last.token) {
        endEpoch(last, 'unknown', t);
        k.dirty = true;
      }
    }
    for (const l of seen.values()) {
      setLease(l, t, false);
      startEpoch(l, t, false);
    }
    markRefreshed();
    render(t);
  }

  function applyEvent(ev) {
    const rev = Number(ev.revision) || 0;
    if (rev <= state.revision) return;
    state.revision = rev;
    const l = normLease(ev.lease || {});
    const t = now();
    switch (ev.type) {
      case 'ACQUIRED': {
        const prev = state.leases.get(l.key);
        if (prev && prev.token !== l.token) removeLease(l.key);
        setLease(l, t, true);
        startEpoch(l, t, true);
        break;
      }
      case 'RELEASED':
        removeLease(l.key, l.token);
        finishEpoch(l, 'released', t);
        break;
      case 'EXPIRED':
        removeLease(l.key, l.token);
        finishEpoch(l, 'expired', t);
        break;
      default:
        return;
    }
    render(t);
  }

  function render(t) {
    $('leases-empty').hidden = state.leases.size > 0;
    $('lease-count').textContent = '(' + numFmt.format(state.leases.size) + ')';
    renderTimeline(t);
  }

  // ---- refreshes ------------------------------------------------------------

  function markRefreshed() {
    $('refreshed').textContent = 'Expires in: the server\'s view at ' + new Date().toLocaleTimeString([], { hour12: false }) +
      ', counted down since. Refreshed every ' + LIST_EVERY_MS / 1e3 + ' s.';
  }

  // refreshRemaining re-reads the remaining time of the leases on show.
  // Membership changes only through events: a List answer may be older than
  // an event that arrived while it was under way.
  async function refreshRemaining() {
    if (!state.live || document.hidden) return;
    const prefix = state.prefix;
    try {
      const r = await fetch('fenced.v1.LeaseService/List', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(prefix ? { prefix } : {}),
        cache: 'no-store',
      });
      if (!r.ok) return;
      const body = await r.json();
      if (prefix !== state.prefix) return;
      const t = now();
      for (const raw of body.leases || []) {
        const l = normLease(raw);
        const cur = state.leases.get(l.key);
        if (cur && cur.token === l.token) {
          cur.remainingMs = l.remainingMs;
          cur.deadline = t + l.remainingMs;
        }
      }
      markRefreshed();
    } catch (err) {
      // The stream's own state tells the user the server is unreachable.
    }
  }

  // ---- stale rejections ----------------------------------------------------

  const possessive = (owner) => (owner ? owner + '\'s' : 'an unknown owner\'s');

  // describeRejection: "worker-A's token 63 refused 3× by ledger-http after
  // worker-B's 64".
  function describeRejection(r) {
    return possessive(r.presentedOwner) + ' token ' + r.presentedToken + ' refused ' +
      numFmt.format(r.count) + '× by ' + (r.resource || 'a resource') + ' after ' +
      possessive(r.highestOwner) + ' ' + r.highestToken;
  }

  // epochOf returns the timeline epoch of token for key, adding one (ended
  // unseen, placed by token) when the page never saw that grant.
  function epochOf(key, token, owner, t) {
    const k = state.keys.get(key) || timelineKey(key, t);
    let e = k.epochs.find((x) => x.token === token);
    if (!e) {
      e = { token, owner, start: null, end: null, status: 'unknown', takeover: false };
      const at = k.epochs.findIndex((x) => BigInt(x.token) > BigInt(token));
      k.epochs.splice(at < 0 ? k.epochs.length : at, 0, e);
      if (k.epochs.length > MAX_EPOCHS) k.epochs.shift();
    }
    k.dirty = true;
    return e;
  }

  function applyRejections(data) {
    const t = now();
    const rejected = new Map();
    for (const r of data.rejections || []) {
      if (!rejected.has(r.scope)) rejected.set(r.scope, new Map());
      const byToken = rejected.get(r.scope);
      if (!byToken.has(r.presentedToken)) byToken.set(r.presentedToken, []);
      byToken.get(r.presentedToken).push(r);
      epochOf(r.scope, r.presentedToken, r.presentedOwner, t);
    }
    for (const key of state.rejected.keys()) {
      const k = state.keys.get(key);
      if (k) k.dirty = true;
    }
    state.rejected = rejected;
    const total = String(data.total ?? 0);
    const el = $('stat-rejections');
    el.dataset.value = total;
    el.textContent = numFmt.format(Number(total));
    const list = $('rejections');
    list.replaceChildren();
    for (const r of (data.rejections || []).slice(0, MAX_REJECTIONS)) {
      const li = document.createElement('li');
      li.className = 'rejection';
      li.dataset.key = r.scope;
      li.dataset.token = r.presentedToken;
      const what = document.createElement('span');
      what.className = 'what';
      what.textContent = r.scope + ': ' + describeRejection(r);
      const detail = document.createElement('span');
      detail.className = 'detail';
      const granted = (ms) => (ms ? 'granted ' + new Date(ms).toLocaleTimeString() : 'grant not remembered');
      detail.textContent = 'presented ' + r.presentedToken + ' (' + granted(r.presentedGrantedUnixMs) + ')' +
        ' · highest ' + r.highestToken + ' (' + granted(r.highestGrantedUnixMs) + ')' +
        (r.reportedOwner ? ' · write sent by ' + r.reportedOwner : '') +
        ' · ' + numFmt.format(r.scopeCount) + ' for this key, ' + numFmt.format(r.resourceCount) +
        ' by ' + (r.resource || 'this resource') + ' · last ' + new Date(r.lastUnixMs).toLocaleTimeString();
      li.append(what, detail);
      list.append(li);
    }
    $('rejections-empty').hidden = list.children.length > 0;
    render(t);
  }

  async function pollRejections() {
    try {
      const q = new URLSearchParams({ limit: '200' });
      if (state.prefix) q.set('prefix', state.prefix);
      const r = await fetch('v1/rejections?' + q, { cache: 'no-store' });
      if (!r.ok) throw new Error(r.statusText);
      const text = await r.text();
      if (text !== state.rejectionsSeen) {
        state.rejectionsSeen = text;
        applyRejections(JSON.parse(text));
      }
    } catch (err) {
      // The counters show the server as unreachable.
    } finally {
      setTimeout(pollRejections, REJECTIONS_EVERY_MS);
    }
  }

  const statFields = ['leases', 'acquired', 'released', 'expired', 'takeovers', 'waiters'];

  async function pollStats() {
    const box = document.querySelector('.counters');
    try {
      const r = await fetch('v1/stats', { cache: 'no-store' });
      if (!r.ok) throw new Error(r.statusText);
      const s = await r.json();
      for (const f of statFields) {
        const el = $('stat-' + f);
        const v = String(s[f] ?? '');
        if (el.dataset.value !== v) {
          el.dataset.value = v;
          el.textContent = v === '' ? '–' : numFmt.format(Number(v));
        }
      }
      $('node').textContent = (s.ready ? 'serving' : 'not ready') + ' · term ' + s.term +
        ' · commit ' + s.commitIndex + ' · applied ' + s.appliedIndex;
      box.classList.remove('stale');
    } catch (err) {
      box.classList.add('stale');
    } finally {
      setTimeout(pollStats, STATS_EVERY_MS);
    }
  }

  function tick() {
    const t = now();
    for (const [key, tr] of state.rows) tickRow(tr, state.leases.get(key), t);
    tickTimeline(t);
  }

  // ---- the prefix filter -------------------------------------------------------

  // Mirrors the server's key rules so that a typo does not turn into a
  // reconnect loop against a 400.
  function prefixProblem(p) {
    if (new TextEncoder().encode(p).length > 512) return 'at most 512 bytes';
    if (/[\u0000-\u001f\u007f-\u009f]/.test(p)) return 'no control characters';
    return '';
  }

  function setPrefix(p) {
    const problem = prefixProblem(p);
    $('prefix-error').textContent = problem;
    if (problem || p === state.prefix) return;
    state.prefix = p;
    const u = new URL(location.href);
    if (p) u.searchParams.set('prefix', p);
    else u.searchParams.delete('prefix');
    history.replaceState(null, '', u);
    clearLeases();
    state.rejectionsSeen = '';
    render(now());
    connect();
  }

  function init() {
    const input = $('prefix');
    const initial = new URL(location.href).searchParams.get('prefix') || '';
    if (!prefixProblem(initial)) {
      state.prefix = initial;
      input.value = initial;
    }
    let debounce = 0;
    input.addEventListener('input', () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => setPrefix(input.value), 300);
    });
    $('filter').addEventListener('submit', (ev) => {
      ev.preventDefault();
      clearTimeout(debounce);
      setPrefix(input.value);
    });
    render(now());
    connect();
    pollStats();
    pollRejections();
    setInterval(tick, TICK_MS);
    setInterval(refreshRemaining, LIST_EVERY_MS);
  }

  init();
})();
