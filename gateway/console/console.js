// The idemhook web console: a client of the admin API (GET /admin/stats,
// GET /admin/deliveries, GET and DELETE /admin/keys/{source}/{key}, and,
// when a route has deliver: queue, GET /admin/queue, /admin/queue/events
// and the queue's POSTs: redrive, pause, resume, purge), served
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
    queue: false, // GET /admin/queue answered 200: a route has deliver: queue
    queueRoutes: new Map(), // path -> the route's elements in the Queue section
    event: null, // the id of the queued event open in its dialog
  };

  class Unauthorized extends Error {}

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  // api calls the admin API. Paths are relative to the page (/admin/).
  // body, when given, is sent as JSON.
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (resp.status === 401) throw new Unauthorized('unauthorized');
    if (resp.status === 204) return null;
    let answer = null;
    try {
      answer = await resp.json();
    } catch (e) {
      // not JSON: the status says enough
    }
    if (!resp.ok) {
      const err = new Error((answer && (answer.detail || answer.title)) || `${method} ${path}: HTTP ${resp.status}`);
      err.status = resp.status;
      err.body = answer;
      throw err;
    }
    return answer;
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
      await loadQueue();
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
        if (state.queue || state.polls % STATS_EVERY === 0) await loadQueue();
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
        sc.title = (d.route || '').endsWith('/{tenant}')
          ? `tenant ${d.scope}: this delivery's key is stored under its scope (?scope= of /admin/keys)`
          : `scope ${d.scope}: this delivery's key is stored under it (?scope= of /admin/keys)`;
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

  // zoneName is the browser's time zone, which the console's times are
  // shown in: its name (Europe/Lisbon), else its offset from UTC.
  function zoneName() {
    try {
      const name = Intl.DateTimeFormat().resolvedOptions().timeZone;
      if (name) return name;
    } catch (e) { /* the offset below */ }
    const off = -new Date().getTimezoneOffset();
    return `UTC${off < 0 ? '-' : '+'}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
  }

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

  // --- delivery queue ----------------------------------------------------

  const QUEUE_DEAD_LIMIT = 50; // dead events listed per route
  // The chart's series, in GET /admin/queue's history.
  const SERIES = [
    ['accepted', 'Accepted'],
    ['delivered', 'Delivered'],
    ['retried', 'Retried'],
    ['dead', 'Dead'],
  ];
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const CHART = { w: 720, h: 140, left: 34, right: 8, top: 8, bottom: 18 };

  // loadQueue shows the Queue section while GET /admin/queue answers 200
  // (a route has deliver: queue) and hides it on a 404. Each route's
  // elements are made once and updated in place, so that a button stays
  // where it was between polls.
  async function loadQueue() {
    let q;
    try {
      q = await api('GET', 'queue');
    } catch (e) {
      if (e.status === 404) {
        state.queue = false;
        $('queue').hidden = true;
        return;
      }
      throw e;
    }
    state.queue = true;
    $('queue').hidden = false;
    const paths = q.routes.map((r) => r.path);
    for (const [path, el] of state.queueRoutes) {
      if (!paths.includes(path)) {
        el.box.remove();
        state.queueRoutes.delete(path);
      }
    }
    for (const r of q.routes) {
      if (!state.queueRoutes.has(r.path)) state.queueRoutes.set(r.path, queueRouteElements(r.path));
      renderQueueRoute(state.queueRoutes.get(r.path), r);
    }
    const boxes = paths.map((p) => state.queueRoutes.get(p).box);
    const shown = [...$('queue-routes').children];
    if (shown.length !== boxes.length || shown.some((b, i) => b !== boxes[i])) $('queue-routes').replaceChildren(...boxes);
    await Promise.all(q.routes.map((r) => loadDead(state.queueRoutes.get(r.path))));
  }

  // queueRouteElements makes one route's part of the Queue section.
  function queueRouteElements(path) {
    const el = { path, paused: false, rendered: '', chart: '' };
    el.box = document.createElement('div');
    el.box.className = 'queue-route';
    el.box.dataset.route = path;

    const head = document.createElement('div');
    head.className = 'queue-head';
    const h = document.createElement('h3');
    // A destination's queue is <route>#<destination>: shown as the route
    // and the destination it delivers to.
    const cut = path.indexOf('#');
    h.textContent = cut < 0 ? path : `${path.slice(0, cut)} \u2192 ${path.slice(cut + 1)}`;
    if (cut >= 0) h.title = `Destination ${path.slice(cut + 1)} of route ${path.slice(0, cut)}: a queue of its own`;
    el.state = document.createElement('span');
    el.state.className = 'badge queue-state';
    el.down = document.createElement('span');
    el.down.className = 'badge refused queue-down';
    el.down.textContent = 'backend down';
    el.down.title = "The route's breaker takes its backend for down: attempts wait until it answers again";
    el.settles = document.createElement('span');
    el.settles.className = 'badge failed queue-settles';
    el.settles.title = "Attempts whose outcome the store has not recorded yet: each is kept and written again at every poll, and its event is not sent again meanwhile";
    const buttons = document.createElement('span');
    buttons.className = 'queue-actions';
    el.pause = button('Pause', 'quiet queue-pause', () => queueAction(el, togglePause));
    el.redriveAll = button('Redrive all dead', 'queue-redrive-all', () => queueAction(el, redriveAll));
    el.redriveAll.title = 'Queue every dead event of this route again, due now';
    el.purge = button('Purge dead…', 'danger queue-purge', () => queueAction(el, purgeDead));
    el.purge.title = 'Delete every dead event of this route, undelivered';
    buttons.append(el.pause, el.redriveAll, el.purge);
    head.append(h, el.state, el.down, el.settles, buttons);

    el.counts = {};
    const counts = document.createElement('dl');
    counts.className = 'queue-counts';
    for (const [name, label, title] of [
      ['queued', 'Queued', 'Waiting for their first attempt'],
      ['retrying', 'Retrying', 'Waiting for a retry'],
      ['running', 'Running', 'An attempt is in flight'],
      ['dead', 'Dead', 'Kept until redriven or purged'],
      ['oldest', 'Oldest', 'How long ago the oldest event not yet delivered (nor dead) was accepted'],
      ['next', 'Next attempt', 'When the earliest queued event is due'],
    ]) {
      const dt = document.createElement('dt');
      dt.textContent = label;
      dt.title = title;
      const dd = document.createElement('dd');
      dd.className = 'q-' + name;
      counts.append(dt, dd);
      el.counts[name] = dd;
    }

    el.svg = document.createElementNS(SVG_NS, 'svg');
    el.svg.setAttribute('class', 'queue-chart');
    el.svg.setAttribute('viewBox', `0 0 ${CHART.w} ${CHART.h}`);
    el.svg.setAttribute('role', 'img');
    const legend = document.createElement('div');
    legend.className = 'legend';
    for (const [name, label] of SERIES) {
      const item = document.createElement('span');
      item.className = 'series-' + name;
      item.textContent = label;
      legend.append(item);
    }

    el.note = document.createElement('p');
    el.note.className = 'muted queue-note';
    el.note.hidden = true;

    el.table = document.createElement('table');
    el.table.className = 'grid rows queue-dead';
    const thead = el.table.createTHead().insertRow();
    for (const [label, cls] of [['Event', 'num'], [`Received (${zoneName()})`, 'received'], ['Key', ''], ['Attempts', 'num'], ['Last status', 'num'], ['Reason', ''], ['', '']]) {
      const th = document.createElement('th');
      th.textContent = label;
      if (cls === 'received') th.title = 'In the browser\'s time zone; hover a time for it in UTC';
      if (cls) th.className = cls;
      thead.append(th);
    }
    el.table.createTBody();
    el.empty = document.createElement('p');
    el.empty.className = 'muted queue-empty';
    el.empty.textContent = 'No dead events.';
    const title = document.createElement('h4');
    title.textContent = 'Dead events';
    el.box.append(head, counts, el.svg, legend, el.note, title, el.table, el.empty);
    return el;
  }

  function button(text, cls, onClick) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = cls;
    b.textContent = text;
    b.addEventListener('click', onClick);
    return b;
  }

  function renderQueueRoute(el, r) {
    el.paused = r.paused;
    el.state.textContent = r.paused ? 'paused' : 'delivering';
    el.state.className = 'badge queue-state ' + (r.paused ? 'failed' : 'processed');
    el.state.title = r.paused ? 'Deliveries are paused: events are still accepted and queued' : 'Events are delivered as they are due';
    el.down.hidden = !r.backend_down;
    const pending = r.settles_pending || 0;
    el.settles.hidden = pending === 0;
    el.settles.textContent = pending === 1 ? '1 outcome not recorded' : pending + ' outcomes not recorded';
    el.pause.textContent = r.paused ? 'Resume' : 'Pause';
    el.pause.title = r.paused ? 'Deliver this route\'s events again' : 'Stop delivering this route\'s events (they are still accepted)';
    for (const name of ['queued', 'retrying', 'running', 'dead']) {
      el.counts[name].textContent = r[name];
      el.counts[name].classList.toggle('zero', r[name] === 0);
    }
    el.counts.oldest.textContent = r.oldest_age_seconds == null ? '–' : formatAge(r.oldest_age_seconds);
    el.counts.next.textContent = r.next_attempt ? formatTime(r.next_attempt) : '–';
    if (r.next_attempt) el.counts.next.title = r.next_attempt;
    el.redriveAll.disabled = r.dead === 0;
    el.purge.disabled = r.dead === 0;
    const chart = JSON.stringify(r.history);
    if (chart !== el.chart) {
      el.chart = chart;
      renderChart(el.svg, r.history);
    }
  }

  function formatAge(s) {
    if (s < 60) return Math.floor(s) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min';
    if (s < 86400) return (s / 3600).toFixed(1) + ' h';
    return (s / 86400).toFixed(1) + ' d';
  }

  // renderChart draws the history (one point per minute, oldest first) as
  // one line per series, with the largest count on the axis, and the
  // minute's counts as the tooltip of its column.
  function renderChart(svg, history) {
    const { w, h, left, right, top, bottom } = CHART;
    const n = Math.max(history.length, 1);
    const peak = Math.max(1, ...history.flatMap((m) => SERIES.map(([s]) => m[s])));
    const x = (i) => left + (n === 1 ? 0 : (i * (w - left - right)) / (n - 1));
    const y = (v) => top + (h - top - bottom) * (1 - v / peak);
    const kids = [];
    const add = (name, attrs, text) => {
      const e = document.createElementNS(SVG_NS, name);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      kids.push(e);
      return e;
    };
    const total = Object.fromEntries(SERIES.map(([s]) => [s, history.reduce((a, m) => a + m[s], 0)]));
    add('title', {}, `Last ${history.length} minutes: ` + SERIES.map(([s, label]) => `${label.toLowerCase()} ${total[s]}`).join(', '));
    add('line', { class: 'axis', x1: left, x2: w - right, y1: y(0), y2: y(0) });
    add('line', { class: 'grid-line', x1: left, x2: w - right, y1: y(peak), y2: y(peak) });
    add('text', { class: 'tick', x: left - 4, y: y(peak) + 4, 'text-anchor': 'end' }, String(peak));
    add('text', { class: 'tick', x: left - 4, y: y(0) + 4, 'text-anchor': 'end' }, '0');
    if (history.length) {
      add('text', { class: 'tick', x: left, y: h - 4, 'text-anchor': 'start' }, clock(history[0].start) + ' ' + zoneName());
      add('text', { class: 'tick', x: w - right, y: h - 4, 'text-anchor': 'end' }, 'now');
    }
    for (const [s] of SERIES) {
      const points = history.map((m, i) => `${x(i).toFixed(1)},${y(m[s]).toFixed(1)}`).join(' ');
      add('polyline', { class: 'series series-' + s, points });
      // A dot on each minute that counted some, so that a history of one
      // minute (a line of one point draws nothing) still shows.
      history.forEach((m, i) => {
        if (m[s] > 0) add('circle', { class: 'series series-' + s, cx: x(i).toFixed(1), cy: y(m[s]).toFixed(1), r: 3 });
      });
    }
    const col = (w - left - right) / n;
    history.forEach((m, i) => {
      if (!SERIES.some(([s]) => m[s] > 0)) return;
      const r = add('rect', { class: 'hover', x: (x(i) - col / 2).toFixed(1), y: top, width: Math.max(col, 2).toFixed(1), height: h - top - bottom });
      const t = document.createElementNS(SVG_NS, 'title');
      t.textContent = clock(m.start) + ': ' + SERIES.map(([s, label]) => `${label.toLowerCase()} ${m[s]}`).join(', ');
      r.append(t);
    });
    svg.replaceChildren(...kids);
  }

  function clock(iso) {
    const t = new Date(iso);
    return `${pad(t.getHours())}:${pad(t.getMinutes())}`;
  }

  async function loadDead(el) {
    const p = new URLSearchParams({ route: el.path, state: 'dead', limit: String(QUEUE_DEAD_LIMIT) });
    const data = await api('GET', 'queue/events?' + p);
    const rendered = JSON.stringify(data.events);
    if (rendered === el.rendered) return;
    el.rendered = rendered;
    const frag = document.createDocumentFragment();
    for (const ev of data.events) {
      const tr = document.createElement('tr');
      tr.dataset.id = ev.id;
      const id = cell(tr, '', 'num');
      const open = button(String(ev.id), 'link event-open', () => openEvent(ev.id));
      open.title = 'Show its attempts';
      id.append(open);
      cell(tr, formatTime(ev.received_at), 'time').title = ev.received_at;
      const key = cell(tr, ev.key, 'key mono');
      key.title = ev.key;
      cell(tr, ev.attempt, 'num');
      cell(tr, ev.last_status || '–', 'num status');
      cell(tr, ev.reason || ev.last_error || '', 'why');
      const act = cell(tr, '');
      const b = button('Redrive', 'quiet event-redrive', () => queueAction(el, () => redrive(el, [ev.id])));
      b.title = 'Queue this event again, due now';
      act.append(b);
      frag.append(tr);
    }
    el.table.tBodies[0].replaceChildren(frag);
    el.table.hidden = data.events.length === 0;
    el.empty.hidden = data.events.length > 0;
    if (data.next) {
      el.empty.hidden = false;
      el.empty.textContent = `The first ${data.events.length} dead events are listed.`;
    } else {
      el.empty.textContent = 'No dead events.';
    }
  }

  // queueAction runs one of a route's actions, then shows the route as it
  // is now. What it did, or why it failed, is the route's note.
  async function queueAction(el, action) {
    el.box.querySelectorAll('button').forEach((b) => (b.disabled = true));
    try {
      const note = await action(el);
      setQueueNote(el, note || '', 'ok-note');
    } catch (e) {
      if (e instanceof Unauthorized) {
        fail(e);
        return;
      }
      setQueueNote(el, e.message, 'error');
    } finally {
      el.box.querySelectorAll('button').forEach((b) => (b.disabled = false));
    }
    try {
      await loadQueue();
    } catch (e) {
      fail(e);
    }
  }

  function setQueueNote(el, text, cls) {
    el.note.textContent = text;
    el.note.className = 'queue-note ' + cls;
    el.note.hidden = !text;
  }

  async function togglePause(el) {
    const r = await api('POST', el.paused ? 'queue/resume' : 'queue/pause', { route: el.path });
    return r.paused ? 'Paused: events are accepted and queued, not delivered.' : 'Resumed: due events are delivered now.';
  }

  async function redrive(el, ids) {
    const r = await api('POST', 'queue/redrive', { route: el.path, ids });
    return `Redriven: ${r.redriven} event${r.redriven === 1 ? '' : 's'} queued again, due now.`;
  }

  async function redriveAll(el) {
    const r = await api('POST', 'queue/redrive', { route: el.path, state: 'dead' });
    return `Redriven: ${r.redriven} dead event${r.redriven === 1 ? '' : 's'} queued again, due now.`;
  }

  // purgeDead asks the API how many dead events a purge would delete (it
  // answers 409 with the count), asks the operator, and purges with that
  // count as the confirmation: if more died meanwhile, the API refuses.
  async function purgeDead(el) {
    const sel = { route: el.path, state: 'dead' };
    let count;
    try {
      await api('POST', 'queue/purge', sel);
      return 'Nothing to purge.';
    } catch (e) {
      if (e.status !== 409 || !e.body || typeof e.body.count !== 'number') throw e;
      count = e.body.count;
    }
    if (count === 0) return 'No dead events to purge.';
    const what = `${count} dead event${count === 1 ? '' : 's'} of ${el.path}`;
    if (!window.confirm(`Purge ${what}?\n\nThey are deleted undelivered: the backend will never get them, and a redelivery by the provider is answered from the stored key, not queued again.`)) {
      return 'Purge cancelled.';
    }
    const r = await api('POST', 'queue/purge', { ...sel, confirm: count });
    return `Purged: ${r.purged} event${r.purged === 1 ? '' : 's'} deleted undelivered.`;
  }

  // openEvent shows a queued event and its attempts.
  async function openEvent(id) {
    state.event = id;
    $('event').replaceChildren();
    $('attempts').tBodies[0].replaceChildren();
    $('attempts').hidden = true;
    $('event-note').textContent = 'loading…';
    $('event-note').className = 'muted';
    $('event-redrive').disabled = true;
    const dlg = $('event-dialog');
    if (!dlg.open) dlg.showModal();
    let ev;
    try {
      ev = await api('GET', 'queue/events/' + encodeURIComponent(id));
    } catch (e) {
      if (e instanceof Unauthorized) {
        dlg.close();
        fail(e);
        return;
      }
      $('event-note').textContent = e.message;
      $('event-note').className = e.status === 404 ? 'muted' : 'error';
      return;
    }
    if (state.event !== id) return;
    const dd = (name, value, ddID) => {
      const dt = document.createElement('dt');
      dt.textContent = name;
      const d = document.createElement('dd');
      d.textContent = value;
      if (ddID) d.id = ddID;
      $('event').append(dt, d);
    };
    dd('Event', ev.id);
    dd('Route', ev.route);
    dd('Key', ev.key);
    if (ev.order_key) dd('Order key', ev.order_key);
    dd('State', ev.state, 'event-state');
    dd('Attempts', ev.attempt);
    dd('Received', formatTime(ev.received_at) + ' ' + zoneName() + '  (' + ev.received_at + ')');
    if (ev.next_at) dd(ev.state === 'running' ? 'Lease ends' : 'Next attempt', formatTime(ev.next_at));
    if (ev.reason) dd('Reason', ev.reason);
    $('event-note').textContent = ev.attempts.length < ev.attempt ? `The first and the latest ${ev.attempts.length} of ${ev.attempt} attempts are kept.` : '';
    const frag = document.createDocumentFragment();
    for (const a of ev.attempts) {
      const tr = document.createElement('tr');
      cell(tr, a.attempt, 'num');
      cell(tr, formatTime(a.time), 'time').title = a.time;
      cell(tr, a.status || '–', 'num status');
      cell(tr, a.latency_ms.toFixed(1), 'num');
      const out = cell(tr, '', 'answer');
      if (a.error) {
        const err = document.createElement('div');
        err.className = 'error-text';
        err.textContent = a.error;
        out.append(err);
      }
      if (a.body_head) {
        const pre = document.createElement('pre');
        pre.textContent = a.body_head;
        out.append(pre);
      }
      cell(tr, a.worker || '', 'instance muted');
      frag.append(tr);
    }
    $('attempts').tBodies[0].replaceChildren(frag);
    $('attempts').hidden = ev.attempts.length === 0;
    $('event-redrive').disabled = ev.state === 'running';
    $('event-redrive').onclick = async () => {
      const el = state.queueRoutes.get(ev.route);
      $('event-redrive').disabled = true;
      try {
        await api('POST', 'queue/redrive', { route: ev.route, ids: [ev.id] });
        if (el) loadQueue().catch(fail);
        openEvent(ev.id);
      } catch (e) {
        if (e instanceof Unauthorized) {
          dlg.close();
          fail(e);
          return;
        }
        $('event-note').textContent = e.message;
        $('event-note').className = 'error';
      }
    };
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
      $('queue-routes').replaceChildren();
      state.queueRoutes.clear();
      state.queue = false;
      $('queue').hidden = true;
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
    $('event-close').addEventListener('click', () => $('event-dialog').close());
    $('delete').addEventListener('click', askDelete);
    $('confirm-delete').addEventListener('click', confirmDelete);
    $('confirm-cancel').addEventListener('click', () => $('confirm-dialog').close());
    restoreFilters();
    start();
  }

  init();
})();
