// The idemhook web console: a client of the admin API (GET /admin/stats,
// GET /admin/deliveries, GET and DELETE /admin/keys/{source}/{key}), served
// by the gateway's admin listener. It uses no framework and no build step.
// It loads nothing from another origin, which the page's
// Content-Security-Policy forbids.
//
// Every value from the API is put in the page as text (textContent), never
// as HTML: keys and routes come from webhook senders.
//
// The deliveries' filters are the page's query (?source=&outcome=&route=
// &since=&until=&limit=, the API's names, times in UTC), so that a filtered
// view can be bookmarked and shared. Each change is a history entry: Back
// and Forward go through the views.
'use strict';

(() => {
  const TOKEN_KEY = 'idemhook.admin.token';
  const POLL_MS = 2000; // live updates: the first page of deliveries
  const STATS_EVERY = 3; // and the statistics every third poll
  const FILTERS = ['source', 'outcome', 'route', 'since', 'until', 'limit'];
  const DEFAULT_LIMIT = '25';
  // The per-source table's columns for each window: every class of
  // outcomes (GET /admin/stats), so that they add up to Total. "other"
  // (outcomes this build doesn't know) shows only when not zero.
  const COLUMNS = [
    ['total', 'Total', 'All deliveries'],
    ['processed', 'Processed', 'First deliveries: the upstream ran and its answer is stored'],
    ['replayed', 'Replayed', 'Duplicates answered with the stored answer, upstream not called'],
    ['refused', 'Refused', 'Answered with an error by the gateway (or not at all: the sender hung up while it waited), upstream not called'],
    ['failed', 'Failed', 'The upstream was called and its answer not stored: claim released, the retry is forwarded again'],
    ['unprotected', 'Unprotected', 'Forwarded to the upstream without a claim: nothing stopped a second run'],
    ['other', 'Other', 'Outcomes this console does not know'],
  ];

  const $ = (id) => document.getElementById(id);
  const state = {
    cursors: [''], // cursors[i] is the cursor of page i
    page: 0,
    next: '',
    maxID: 0, // newest ID seen on the first page, to mark new rows
    seq: 0, // answers to older requests are dropped
    classes: {}, // outcome -> processed, replayed, refused or other
    timer: 0,
    polls: 0,
    running: false,
    record: null, // {source, key, path} of the open key
    rendered: '', // the query and rows the table shows
    addressProblem: '', // what was wrong in the page's query, shown until the filters change
  };

  class Unauthorized extends Error {}

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  // api calls the admin API. Paths are relative to the page (/admin/).
  async function api(method, path) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const resp = await fetch(path, { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' });
    if (resp.status === 401) throw new Unauthorized('unauthorized');
    if (resp.status === 204) return null;
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      // not JSON: the status says enough
    }
    if (!resp.ok) {
      const err = new Error((body && (body.detail || body.title)) || `${method} ${path}: HTTP ${resp.status}`);
      err.status = resp.status;
      err.body = body;
      throw err;
    }
    return body;
  }

  function showError(msg) {
    $('error').textContent = msg;
    $('error').hidden = false;
  }
  function clearError() {
    if (state.addressProblem) {
      showError(state.addressProblem);
      return;
    }
    $('error').hidden = true;
  }

  function fail(e) {
    if (e instanceof Unauthorized) {
      showLogin(token() ? 'The gateway refused this token.' : '');
      return;
    }
    showError(e.message);
  }

  function showLogin(msg) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    $('app').hidden = true;
    $('session').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = msg;
    $('login-error').hidden = !msg;
    clearError();
    $('token').focus();
  }

  async function start() {
    $('login').hidden = true;
    // The first call tells whether the token is needed, or right. The
    // app shows only then.
    let err = null;
    try {
      await loadStats();
    } catch (e) {
      if (e instanceof Unauthorized) {
        fail(e);
        return;
      }
      err = e;
    }
    $('app').hidden = false;
    $('session').hidden = false;
    $('signout').hidden = !token();
    try {
      await loadDeliveries();
      if (err) throw err;
      clearError();
    } catch (e) {
      fail(e);
      if (e instanceof Unauthorized) return;
    }
    state.running = true;
    schedule();
  }

  function stop() {
    state.running = false;
    clearTimeout(state.timer);
  }

  function schedule() {
    clearTimeout(state.timer);
    if (state.running) state.timer = setTimeout(tick, POLL_MS);
  }

  async function tick() {
    if ($('live').checked && !document.hidden) {
      try {
        state.polls++;
        if (state.polls % STATS_EVERY === 0) await loadStats();
        if (state.page === 0) await loadDeliveries();
        clearError();
      } catch (e) {
        fail(e);
        if (e instanceof Unauthorized) return;
      }
    }
    schedule();
  }

  function setUpdated() {
    const paused = state.page > 0 ? ' · live paused on older pages' : '';
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString() + paused;
  }

  // --- statistics --------------------------------------------------------

  async function loadStats() {
    const s = await api('GET', 'stats');
    state.classes = Object.fromEntries(s.outcomes.map((o) => [o.name, o.class]));
    const sources = s.sources.map((x) => x.source);
    fillSelect($('f-source'), sources, true);
    fillSelect($('k-source'), sources, false);
    fillSelect($('f-route'), [...new Set(s.routes.map((r) => r.path))], true);
    fillSelect($('f-outcome'), s.outcomes.map((o) => o.name), true);

    const hasOther = s.sources.some((x) => x.hour.other > 0 || x.day.other > 0);
    const cols = COLUMNS.filter(([name]) => name !== 'other' || hasOther);
    renderStatsHead(cols);
    const tb = $('stats').tBodies[0];
    const frag = document.createDocumentFragment();
    for (const src of s.sources) {
      const tr = document.createElement('tr');
      tr.dataset.source = src.source;
      const name = cell(tr, '');
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'link plain';
      b.textContent = src.source;
      b.title = 'Show the deliveries of ' + src.source;
      b.addEventListener('click', () => {
        $('filters').reset();
        setOption($('f-source'), src.source);
        applyFilters();
      });
      name.append(b);
      for (const w of [src.hour, src.day]) {
        for (const [cls] of cols) {
          const td = cell(tr, w[cls], 'num ' + cls + (w[cls] === 0 ? ' zero' : ''));
          if (cls === 'total') {
            td.title = `${w.total} deliveries`;
            continue;
          }
          const outcomes = outcomesOf(w, cls);
          td.title = outcomes.map(([o, n]) => `${o}: ${n}`).join('\n') || 'none';
          // A count of one outcome lists those deliveries when clicked.
          if (outcomes.length === 1) {
            const [o] = outcomes[0];
            const b = document.createElement('button');
            b.type = 'button';
            b.className = 'link count';
            b.textContent = w[cls];
            b.addEventListener('click', () => {
              $('filters').reset();
              setOption($('f-source'), src.source);
              setOption($('f-outcome'), o);
              applyFilters();
            });
            td.replaceChildren(b);
          }
        }
        const rate = w.duplicate_rate == null ? '–' : (100 * w.duplicate_rate).toFixed(1) + ' %';
        const td = cell(tr, rate, 'num rate window-end');
        td.title = `${w.duplicates} of ${w.total} deliveries`;
      }
      frag.append(tr);
    }
    tb.replaceChildren(frag);
  }

  // renderStatsHead writes the per-source table's head for cols.
  function renderStatsHead(cols) {
    const head = $('stats').tHead;
    const key = cols.map(([name]) => name).join();
    if (head.dataset.cols === key) return;
    head.dataset.cols = key;
    const top = document.createElement('tr');
    const src = document.createElement('th');
    src.rowSpan = 2;
    src.textContent = 'Source';
    top.append(src);
    const sub = document.createElement('tr');
    for (const win of ['Last hour', 'Last 24 hours']) {
      const th = document.createElement('th');
      th.colSpan = cols.length + 1;
      th.className = 'group window-end';
      th.textContent = win;
      top.append(th);
      for (const [name, label, title] of cols) {
        const c = document.createElement('th');
        c.className = 'num ' + name;
        c.textContent = label;
        c.title = title;
        sub.append(c);
      }
      const d = document.createElement('th');
      d.className = 'num window-end';
      d.textContent = 'Duplicates';
      d.title = 'Share of deliveries whose key was already claimed';
      sub.append(d);
    }
    head.replaceChildren(top, sub);
  }

  // outcomesOf returns the outcomes of class cls in window w with their
  // counts, e.g. [["failed_released", 3]].
  function outcomesOf(w, cls) {
    return Object.entries(w.outcomes).filter(([o, n]) => n > 0 && (state.classes[o] || 'other') === cls);
  }

  // fillSelect sets the options of sel to values (after the "any" option
  // when keepFirst), keeping the selected value.
  // The selected value stays an option, also when values lacks it (a
  // filter from the page's address that names no configured route).
  function fillSelect(sel, values, keepFirst) {
    const cur = sel.value;
    if (cur && !values.includes(cur)) values = [...values, cur];
    const have = [...sel.options].slice(keepFirst ? 1 : 0).map((o) => o.value);
    if (have.length === values.length && have.every((v, i) => v === values[i])) return;
    const opts = values.map((v) => new Option(v, v));
    if (keepFirst) opts.unshift(sel.options[0]);
    sel.replaceChildren(...opts);
    if (cur) sel.value = cur;
  }

  // setOption selects value in sel, adding it as an option if needed.
  function setOption(sel, value) {
    if (![...sel.options].some((o) => o.value === value)) sel.append(new Option(value, value));
    sel.value = value;
  }

  function cell(tr, text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    tr.append(td);
    return td;
  }

  // --- deliveries --------------------------------------------------------

  function filterParams() {
    const p = new URLSearchParams();
    for (const name of ['source', 'outcome', 'route']) {
      const v = $('f-' + name).value;
      if (v) p.set(name, v);
    }
    for (const name of ['since', 'until']) {
      const v = $('f-' + name).value; // local time, as the inputs show it
      if (!v) continue;
      const t = new Date(v);
      if (isNaN(t)) throw new Error(`${name}: not a time: ${v}`);
      p.set(name, t.toISOString().replace('.000Z', 'Z'));
    }
    p.set('limit', $('f-limit').value);
    return p;
  }

  async function loadDeliveries() {
    const seq = ++state.seq;
    const p = filterParams();
    const cursor = state.cursors[state.page];
    if (cursor) p.set('cursor', cursor);
    const data = await api('GET', 'deliveries?' + p);
    if (seq !== state.seq) return; // a newer request was sent meanwhile
    // Unchanged rows are left alone, so that a selection (a key being
    // copied) survives the live updates.
    const rendered = JSON.stringify([p.toString(), data.deliveries]);
    if (rendered !== state.rendered) {
      state.rendered = rendered;
      renderDeliveries(data.deliveries);
    }
    state.next = data.next || '';
    $('newer').disabled = state.page === 0;
    $('older').disabled = !state.next;
    $('page').textContent = 'page ' + (state.page + 1);
    setUpdated();
  }

  // renderDeliveries shows one row per delivery, and below a delivery
  // with a reason (why it was refused or failed, or ran unprotected) a
  // second row with it.
  function renderDeliveries(rows) {
    const tb = $('deliveries').tBodies[0];
    const frag = document.createDocumentFragment();
    const mark = state.page === 0 && state.maxID > 0;
    let maxID = state.maxID;
    for (const d of rows) {
      const tr = document.createElement('tr');
      tr.dataset.id = d.id;
      const fresh = mark && d.id > state.maxID;
      if (fresh) tr.classList.add('new');
      maxID = Math.max(maxID, d.id);
      const cls = state.classes[d.outcome] || 'other';
      cell(tr, formatTime(d.time), 'time').title = d.time;
      cell(tr, d.source, 'source');
      const route = cell(tr, d.route, 'route');
      if (d.scope) {
        const sc = document.createElement('span');
        sc.className = 'scope';
        sc.textContent = d.scope;
        sc.title = `scope ${d.scope}: this delivery's key is stored under it (?scope= of /admin/keys)`;
        route.append(sc);
      }
      const k = cell(tr, '', 'key');
      if (d.key) {
        const b = document.createElement('button');
        b.type = 'button';
        b.className = 'link';
        b.textContent = d.key;
        b.title = d.key;
        b.addEventListener('click', () => openKey(d.source, d.key, d.scope || ''));
        k.append(b);
      } else {
        k.textContent = '–';
        k.classList.add('muted');
        k.title = 'no key: the delivery was refused or ran before one was resolved';
      }
      const o = cell(tr, '', 'outcome');
      const badge = document.createElement('span');
      badge.className = 'badge ' + cls;
      badge.textContent = d.outcome;
      o.append(badge);
      cell(tr, d.status, 'num status');
      cell(tr, d.duration_ms.toFixed(1), 'num');
      cell(tr, formatBytes(d.request_bytes), 'num');
      cell(tr, formatBytes(d.response_bytes), 'num');
      cell(tr, d.instance || '', 'instance muted');
      frag.append(tr);
      if (d.reason) {
        tr.classList.add('has-reason');
        const why = document.createElement('tr');
        why.className = 'reason ' + cls + (fresh ? ' new' : '');
        why.dataset.for = d.id;
        cell(why, '').colSpan = 2; // under the time and the source
        const td = cell(why, d.reason, 'why');
        td.colSpan = tr.cells.length - 2;
        frag.append(why);
      }
    }
    tb.replaceChildren(frag);
    if (state.page === 0) state.maxID = maxID;
    $('empty').hidden = rows.length > 0;
  }

  const pad = (n, w = 2) => String(n).padStart(w, '0');

  function formatTime(iso) {
    const t = new Date(iso);
    return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ` +
      `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}.${pad(t.getMilliseconds(), 3)}`;
  }

  function formatBytes(n) {
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1024 / 1024).toFixed(1) + ' MiB';
  }

  // applyFilters lists the deliveries the form's filters select, from
  // the first page, and makes them the page's address (a new history
  // entry when they changed).
  function applyFilters() {
    state.addressProblem = '';
    let q;
    try {
      q = filterParams();
    } catch (e) {
      showError(e.message);
      return;
    }
    if (q.get('limit') === DEFAULT_LIMIT) q.delete('limit');
    if (q.toString() !== location.search.slice(1)) {
      history.pushState(null, '', q.size ? '?' + q : location.pathname);
    }
    reload();
  }

  // reload lists the deliveries from the first page.
  function reload() {
    state.cursors = [''];
    state.page = 0;
    state.maxID = 0;
    loadDeliveries().then(clearError, fail);
  }

  // restoreFilters sets the form's filters from the page's query. What is
  // wrong in it (an unknown parameter, a time that isn't one) is shown as
  // an error and left out; a value the API refuses (an unknown outcome)
  // gets the API's message.
  function restoreFilters() {
    const problems = [];
    $('filters').reset();
    for (const [name, v] of new URLSearchParams(location.search)) {
      if (!FILTERS.includes(name)) {
        problems.push(`unknown parameter "${name}" (known: ${FILTERS.join(', ')})`);
      } else if (name === 'since' || name === 'until') {
        const t = new Date(v);
        if (isNaN(t)) problems.push(`${name}: "${v}" is not a time (e.g. 2026-12-01T09:00:00Z)`);
        else $('f-' + name).value = localInput(t);
      } else if (name === 'limit') {
        const sizes = [...$('f-limit').options].map((o) => o.value);
        if (sizes.includes(v)) $('f-limit').value = v;
        else problems.push(`limit: "${v}" is not one of ${sizes.join(', ')}`);
      } else if (v) {
        setOption($('f-' + name), v);
      }
    }
    state.addressProblem = problems.length ? 'The page address has ' + problems.join('; ') + '.' : '';
    if (state.addressProblem) showError(state.addressProblem);
  }

  // localInput is t as a datetime-local input's value, in the browser's
  // time zone.
  function localInput(t) {
    let v = `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())}T${pad(t.getHours())}:${pad(t.getMinutes())}`;
    if (t.getSeconds() || t.getMilliseconds()) v += ':' + pad(t.getSeconds());
    if (t.getMilliseconds()) v += '.' + pad(t.getMilliseconds(), 3);
    return v;
  }

  // --- one key -----------------------------------------------------------

  // scope is the key's scope on a prefix route (the request's path), as the
  // audit trail recorded it. It is '' for an unscoped key.
  async function openKey(source, key, scope) {
    let path = 'keys/' + encodeURIComponent(source) + '/' + encodeURIComponent(key);
    if (scope) path += '?scope=' + encodeURIComponent(scope);
    state.record = { source, key, scope, path };
    $('record').replaceChildren();
    $('record-scopes').replaceChildren();
    $('record-scopes').hidden = true;
    $('record-body').hidden = true;
    setNote('loading…');
    $('delete').disabled = true;
    const dlg = $('key-dialog');
    if (!dlg.open) dlg.showModal();
    try {
      const rec = await api('GET', path);
      if (state.record.path !== path) return;
      renderRecord(rec);
    } catch (e) {
      if (e instanceof Unauthorized) {
        dlg.close();
        fail(e);
        return;
      }
      field('Source', source);
      if (scope) field('Scope', scope);
      field('Key', key);
      setNote(e.message, e.status === 404 ? 'muted' : 'error');
      showScopes(source, key, (e.body && e.body.scopes) || []);
    }
  }

  // showScopes offers to open the key under each scope a 404 named (a
  // prefix route's key looked up without its scope).
  function showScopes(source, key, scopes) {
    if (!scopes.length) return;
    const box = $('record-scopes');
    const label = document.createElement('span');
    label.className = 'muted';
    label.textContent = 'Open it under scope';
    box.append(label);
    for (const sc of scopes) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'quiet';
      b.textContent = sc;
      b.addEventListener('click', () => openKey(source, key, sc));
      box.append(b);
    }
    box.hidden = false;
  }

  function field(name, value) {
    const dt = document.createElement('dt');
    dt.textContent = name;
    const dd = document.createElement('dd');
    dd.textContent = value;
    $('record').append(dt, dd);
    return dd;
  }

  function setNote(text, cls) {
    $('record-note').textContent = text;
    $('record-note').className = cls || 'muted';
  }

  function renderRecord(rec) {
    field('Store key', rec.store_key).id = 'record-key';
    field('State', rec.state).id = 'record-state';
    field('Created', formatTime(rec.created_at) + '  (' + rec.created_at + ')');
    setNote('');
    if (rec.state === 'completed') {
      field('Status', rec.status);
      const hs = Object.entries(rec.headers || {}).map(([k, vs]) => vs.map((v) => `${k}: ${v}`).join('\n'));
      if (hs.length) field('Headers', hs.join('\n')).classList.add('pre');
      if (rec.body_omitted) setNote('The answer was too large to store: a replay has its status and headers, and an empty body.');
      if (rec.body != null && rec.body !== '') {
        $('record-body').textContent = rec.body;
        $('record-body').hidden = false;
        if (rec.body_encoding === 'base64') setNote('The body is not UTF-8: shown in base64.');
      }
    } else {
      setNote('A delivery of this event is running (no answer stored yet).');
    }
    $('delete').disabled = false;
  }

  function askDelete() {
    const key = $('record-key');
    $('confirm-key').textContent = key ? key.textContent : state.record.key;
    $('confirm-dialog').showModal();
  }

  async function confirmDelete() {
    $('confirm-dialog').close();
    const { path } = state.record;
    $('delete').disabled = true;
    try {
      await api('DELETE', path);
      const st = $('record-state');
      if (st) st.textContent = 'deleted';
      $('record-body').hidden = true;
      setNote('Deleted. The next delivery of this event is forwarded to the upstream again.', 'ok-note');
    } catch (e) {
      if (e instanceof Unauthorized) {
        $('key-dialog').close();
        fail(e);
        return;
      }
      $('delete').disabled = e.status === 404;
      setNote(e.message, 'error');
    }
  }

  // --- wiring ------------------------------------------------------------

  function init() {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (zone) $('time-zone').textContent = `(${zone})`;
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      $('token').value = '';
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      start();
    });
    $('signout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $('stats').tBodies[0].replaceChildren();
      $('deliveries').tBodies[0].replaceChildren();
      state.rendered = '';
      showLogin('');
    });
    $('live').addEventListener('change', () => {
      if ($('live').checked && state.running) tick();
    });
    $('filters').addEventListener('submit', (ev) => {
      ev.preventDefault();
      applyFilters();
    });
    for (const id of ['f-source', 'f-outcome', 'f-route', 'f-limit']) {
      $(id).addEventListener('change', applyFilters);
    }
    $('f-reset').addEventListener('click', () => {
      $('filters').reset();
      applyFilters();
    });
    window.addEventListener('popstate', () => {
      restoreFilters();
      if (state.running) reload();
    });
    $('older').addEventListener('click', () => {
      state.cursors[state.page + 1] = state.next;
      state.page++;
      loadDeliveries().then(clearError, fail);
    });
    $('newer').addEventListener('click', () => {
      state.page = Math.max(0, state.page - 1);
      loadDeliveries().then(clearError, fail);
    });
    $('lookup').addEventListener('submit', (ev) => {
      ev.preventDefault();
      openKey($('k-source').value, $('k-key').value.trim(), $('k-scope').value.trim());
    });
    $('key-close').addEventListener('click', () => $('key-dialog').close());
    $('delete').addEventListener('click', askDelete);
    $('confirm-delete').addEventListener('click', confirmDelete);
    $('confirm-cancel').addEventListener('click', () => $('confirm-dialog').close());
    restoreFilters();
    start();
  }

  init();
})();
