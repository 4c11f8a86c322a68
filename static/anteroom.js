/*! anteroom.js: the drop-in waiting-line snippet of the anteroom sidecar.
 * Plain JavaScript, no build step, no dependencies. Include it once:
 *   <script src="/anteroom/anteroom.js" data-gate="default"></script>
 *
 * <script> attributes, all optional:
 *   data-gate           gate name (default "default")
 *   data-base           sidecar base path or URL (default: the src without
 *                       "/anteroom.js"; fallback "/anteroom")
 *   data-target         CSS selector of an element whose content the waiting
 *                       card replaces (default: a full-page overlay)
 *   data-reload         "true": reload the page once admitted
 *   data-redirect-url   same-origin URL to go to once admitted (beats reload)
 *   data-text-waiting   heading                 "You are in line"
 *   data-text-place     {place} {total}         "Your place: {place} of {total}"
 *   data-text-admitted  once admitted           "You're in!"
 *   data-text-info      under the place         "You'll be let in automatically - keep this tab open."
 *   data-text-left      {waiting}, when people ahead left the line
 *   data-text-eta       {eta}                   "Estimated wait: {eta}"
 *   data-text-retry     while the server is unreachable  "Reconnecting..."
 *
 * API: window.anteroom = {state, view, gate, base, join(), leave(), release(), on(event, fn)}
 *   state: "joining" | "waiting" | "active" | "left"; view: the last SessionView.
 *   on("waiting"|"update"|"active"|"left", fn(view)) returns an unsubscribe function.
 *   The same events are dispatched on document as CustomEvent "anteroom:<event>".
 * DOM: #anteroom-overlay (overlay root; or the target gets class anteroom-waiting),
 *   #anteroom-card, #anteroom-title, #anteroom-place (role=status), #anteroom-progress,
 *   #anteroom-hint, #anteroom-info, #anteroom-note, <style id="anteroom-style">.
 * Wire contract: DESIGN.md ("The wire contract").
 */
(() => {
  'use strict';
  if (window.anteroom) return; // included twice: the first copy wins

  const me = document.currentScript;
  const opt = (name, def) => {
    const v = me && me.getAttribute('data-' + name);
    return v == null || v === '' ? def : v;
  };
  const enc = encodeURIComponent;
  const gate = opt('gate', 'default');
  const base = resolveBase(opt('base', null));
  // A base on another origin needs CORS with credentials on the sidecar.
  const creds = /^[a-z][a-z0-9+.-]*:/i.test(base) ? 'include' : 'same-origin';
  const reload = opt('reload', '') === 'true';
  const redirect = sameOriginURL(opt('redirect-url', ''));
  const T = {
    waiting: opt('text-waiting', 'You are in line'),
    place: opt('text-place', 'Your place: {place} of {total}'),
    admitted: opt('text-admitted', "You're in!"),
    info: opt('text-info', "You'll be let in automatically \u2014 keep this tab open."),
    left: opt('text-left', 'Only {waiting} still waiting \u2014 some ahead of you left.'),
    eta: opt('text-eta', 'Estimated wait: {eta}'),
    retry: opt('text-retry', 'Reconnecting\u2026'),
  };
  const fill = (t, o) => t.replace(/\{(\w+)\}/g, (m, k) => (k in o ? String(o[k]) : m));
  // Full-jitter exponential backoff: random in [0, min(cap, base * 2^n)).
  const backoff = (n, b, cap) => Math.random() * Math.min(cap, b * 2 ** n);
  const reducedMotion = () => !!(window.matchMedia && matchMedia('(prefers-reduced-motion: reduce)').matches);

  let state = 'joining';
  let view = null; // last SessionView, global messages merged in
  // The session token from join (or a status that re-issued it). It travels
  // only in the Authorization header, never in a URL (URLs end up in access
  // logs): the websocket, which cannot carry a header, gets a one-minute
  // single-purpose ticket instead.
  let token = '';
  let ui = null;
  let ws = null, wsTimer = 0, wsFails = 0;
  let polling = false, pollTimer = 0, lastCheck = 0;
  let joining = false, joinTimer = 0, joinFails = 0;
  let departed = false; // a leave beacon was sent for the current departure
  let maxPlace = 0;
  const listeners = {};

  function resolveBase(b) {
    if (b == null && me && me.src) {
      try {
        const u = new URL(me.src, location.href);
        if (/\/anteroom\.js$/.test(u.pathname)) {
          b = (u.origin === location.origin ? '' : u.origin) + u.pathname.replace(/\/anteroom\.js$/, '');
        }
      } catch (e) { /* fall back below */ }
    }
    return (b == null ? '/anteroom' : b).replace(/\/+$/, '');
  }

  function sameOriginURL(s) {
    if (!s) return '';
    try {
      const u = new URL(s, location.href);
      return u.origin === location.origin ? u.href : '';
    } catch (e) { return ''; }
  }

  function emit(name, v) {
    (listeners[name] || []).slice().forEach((fn) => {
      try { fn(v); } catch (e) { console.error('anteroom: listener', e); }
    });
    try { document.dispatchEvent(new CustomEvent('anteroom:' + name, { detail: v })); } catch (e) { /* old browser */ }
  }

  function api(method, path, body, extra) {
    const init = Object.assign({ method, credentials: creds, cache: 'no-store', headers: {} }, extra);
    if (token) init.headers.Authorization = 'Bearer ' + token;
    if (body) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(base + path, init);
  }
  const readJSON = (res) => res.json().catch(() => null);
  // Retry-After in seconds (an HTTP date is ignored), clamped to [1s, 5min].
  function retryAfter(res, def) {
    const s = parseFloat(res.headers.get('Retry-After'));
    return s >= 0 ? Math.min(300000, Math.max(1000, s * 1000)) : def;
  }
  const isView = (v) => v && typeof v === 'object' && (v.status === 'waiting' || v.status === 'active');

  // ---- joining ----------------------------------------------------------
  async function join() {
    clearTimeout(joinTimer);
    if (joining || state === 'left') return;
    joining = true;
    try {
      const res = await api('POST', '/api/join', { gate });
      if (!res.ok) {
        // 429/5xx are passing trouble; other errors (a bad gate...) are not.
        if (res.status === 429 || res.status >= 500) retryJoin(retryAfter(res, 0));
        else console.warn('anteroom: join refused', res.status, await readJSON(res));
        return;
      }
      const v = await readJSON(res);
      if (!isView(v)) throw new Error('unexpected join answer');
      joinFails = 0;
      note('');
      onView(v);
    } catch (e) {
      retryJoin(0);
    } finally {
      joining = false;
    }
  }

  function retryJoin(min) {
    if (state === 'left' || state === 'active') return;
    joinFails++;
    joinTimer = setTimeout(join, Math.max(min, 1000 + backoff(joinFails, 1000, 30000)));
    if (joinFails > 1) note(T.retry);
  }

  // A full SessionView (join, status, or a "session" message).
  function onView(v) {
    if (v.token) token = v.token;
    if (state === 'left' || state === 'active') return;
    if (v.status === 'active') return admit(v);
    view = Object.assign({}, view, v);
    delete view.type;
    if (state !== 'waiting') {
      state = 'waiting';
      show();
      emit('waiting', view);
    }
    render();
    emit('update', view);
    connect();
  }

  function admit(v) {
    const wasWaiting = state === 'waiting';
    state = 'active';
    view = Object.assign({}, view, v);
    delete view.type;
    stopNet();
    emit('active', view);
    const nav = navigate(wasWaiting);
    if (!ui) return;
    ui.title.textContent = T.admitted;
    ui.place.textContent = T.admitted; // announced (live region), shown by the title
    ui.hint.textContent = ui.note.textContent = '';
    (ui.target ? ui.card : ui.root).classList.add('anteroom-in');
    ui.bar.style.width = '100%';
    if (nav) return;
    (ui.target ? ui.card : ui.root).classList.add('anteroom-done'); // fade out
    setTimeout(hide, reducedMotion() ? 0 : 400);
  }

  // Reload or redirect once admitted, if asked to. A page admitted at once
  // (it never waited) does not navigate again within 10s of a navigation,
  // so a page served again afterwards (the waiting page itself) cannot loop.
  function navigate(wasWaiting) {
    if (!redirect && !reload) return false;
    try {
      const k = 'anteroom-nav:' + gate;
      if (!wasWaiting && Date.now() - Number(sessionStorage.getItem(k)) < 10000) return false;
      sessionStorage.setItem(k, String(Date.now()));
    } catch (e) { /* no storage: navigate anyway */ }
    setTimeout(() => (redirect ? location.assign(redirect) : location.reload()), 300);
    return true;
  }

  // ---- live updates: WebSocket, polling as fallback ---------------------
  // A ticket for the websocket: one minute, this session, this gate. Without
  // one (an older sidecar, a network error) the socket relies on the cookie.
  async function wsTicket() {
    if (!token) return '';
    try {
      const res = await api('POST', '/api/ticket', { purpose: 'ws', gate });
      const t = res.ok && (await readJSON(res));
      return (t && typeof t.ticket === 'string' && t.ticket) || '';
    } catch (e) { return ''; }
  }

  let connecting = false;
  async function connect() {
    if (ws || wsTimer || connecting || state !== 'waiting') return;
    connecting = true;
    const ticket = await wsTicket();
    connecting = false;
    if (ws || wsTimer || state !== 'waiting') return;
    let sock;
    try {
      const u = new URL(base + '/ws', location.href);
      u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
      u.search = '?gate=' + enc(gate) + (ticket ? '&ticket=' + enc(ticket) : '');
      sock = ws = new WebSocket(u.href);
    } catch (e) {
      ws = null;
      return wsClosed();
    }
    let opened = 0;
    sock.onopen = () => {
      opened = Date.now();
      stopPoll();
      note('');
    };
    sock.onmessage = (e) => {
      if (sock !== ws) return;
      let m;
      try { m = JSON.parse(e.data); } catch (x) { return; }
      if (m && m.type === 'session' && isView(m)) onView(m);
      else if (m && m.type === 'global') onGlobal(m);
    };
    sock.onerror = () => {}; // onclose follows
    sock.onclose = () => {
      if (sock !== ws) return;
      ws = null;
      if (opened && Date.now() - opened > 10000) wsFails = 0; // it was stable
      wsClosed();
    };
  }

  function wsClosed() {
    if (state !== 'waiting') return;
    wsFails++;
    if (wsFails >= 2) startPoll();
    wsTimer = setTimeout(() => { wsTimer = 0; connect(); }, backoff(wsFails, 500, 30000));
  }

  function onGlobal(g) {
    if (state !== 'waiting' || (g.gate && g.gate !== gate)) return;
    view = Object.assign({}, view, g);
    delete view.type;
    render();
    emit('update', view);
    // The line moved past us: we were promoted (or purged). Ask, at most every 5s.
    if (view.position < view.firstWaitingPosition && Date.now() - lastCheck > 5000) {
      lastCheck = Date.now();
      status(false);
    }
  }

  function startPoll() {
    if (polling) return;
    polling = true;
    status(true);
  }
  function stopPoll() {
    polling = false;
    clearTimeout(pollTimer);
  }

  async function status(again) {
    let next = 5000;
    try {
      const res = await api('GET', '/api/status?gate=' + enc(gate));
      if (res.status === 404) join(); // the session is gone: join again
      else if (res.ok) {
        const v = await readJSON(res);
        if (isView(v)) onView(v);
      }
      next = retryAfter(res, next);
      if (!res.ok && res.status !== 404) note(T.retry);
    } catch (e) {
      note(T.retry);
    }
    if (again && polling && state === 'waiting') {
      clearTimeout(pollTimer);
      pollTimer = setTimeout(() => status(true), next);
    }
  }

  function stopNet() {
    clearTimeout(joinTimer);
    clearTimeout(wsTimer);
    wsTimer = 0;
    stopPoll();
    if (ws) {
      const s = ws;
      ws = null;
      try { s.close(1000); } catch (e) { /* already closed */ }
    }
  }

  // ---- departure and return ---------------------------------------------
  // Only a waiting session sends leave beacons: the server keeps its place
  // for waiting_timeout, and a join on return clears the mark. An active
  // session sends none, not even on pagehide: leave would only refresh it,
  // and a release would throw the slot away on every reload or navigation
  // inside the app. It ends by active_timeout, or by release().
  // The departure travels as a keepalive fetch, which outlives the page and,
  // unlike sendBeacon, carries the Authorization header; sendBeacon (cookie
  // only) is the fallback where keepalive fetch is missing.
  let departedAt = 0;
  function depart() {
    if (state !== 'waiting' || departed) return false;
    departed = true;
    departedAt = Date.now();
    const path = '/api/leave?gate=' + enc(gate);
    let sent = false;
    try {
      api('POST', path, null, { keepalive: true }).catch(() => {});
      sent = true;
    } catch (e) { /* no keepalive fetch */ }
    if (!sent) {
      try { navigator.sendBeacon(base + path); } catch (e) { /* gone */ }
    }
    return true;
  }

  function back() {
    if (state !== 'waiting') return;
    if (departed) {
      departed = false;
      join(); // clears the departure mark; onView reconnects
      // The beacon and this join travel independently: a beacon that lands
      // after the join would leave the mark set. Back soon after leaving,
      // join once more a little later (join is idempotent).
      if (Date.now() - departedAt < 2000) {
        setTimeout(() => { if (state === 'waiting' && !departed) join(); }, 1000);
      }
    } else {
      connect();
    }
  }

  addEventListener('pagehide', depart);
  // If the unload is cancelled (the app's "leave site?" prompt), we are
  // still here a second later: take the departure back.
  addEventListener('beforeunload', () => { if (depart()) setTimeout(back, 1000); });
  addEventListener('pageshow', (e) => { if (e.persisted) back(); });
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'hidden') depart();
    else back();
  });

  // ---- UI -----------------------------------------------------------------
  const CSS = `
.anteroom-lock{overflow:hidden}
.anteroom-overlay{position:fixed;inset:0;z-index:2147483647;display:flex;align-items:center;justify-content:center;padding:1rem;background:rgba(15,23,42,.72)}
.anteroom-card{box-sizing:border-box;width:100%;max-width:26rem;margin:0 auto;padding:1.75rem 1.5rem;border-radius:12px;background:#fff;color:#0f172a;box-shadow:0 10px 40px rgba(0,0,0,.3);text-align:center;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;outline:none}
.anteroom-waiting .anteroom-card{box-shadow:0 2px 12px rgba(0,0,0,.12)}
.anteroom-title{margin:0 0 .5rem;font-size:1.35rem;font-weight:600}
.anteroom-place{margin:0 0 1rem;font-size:1.15rem;font-variant-numeric:tabular-nums}
.anteroom-track{height:6px;margin:0 0 1rem;border-radius:3px;background:#e2e8f0;overflow:hidden}
.anteroom-bar{height:100%;width:4%;border-radius:3px;background:#2563eb linear-gradient(90deg,transparent,rgba(255,255,255,.45),transparent);background-size:200% 100%;transition:width .6s ease;animation:anteroom-shine 1.8s linear infinite}
.anteroom-hint,.anteroom-info,.anteroom-note{margin:.25rem 0 0;font-size:.9rem;color:#475569}
.anteroom-hint:empty,.anteroom-note:empty{display:none}
.anteroom-in .anteroom-title{color:#15803d}
.anteroom-in .anteroom-place{position:absolute;width:1px;height:1px;margin:0;overflow:hidden;clip:rect(0 0 0 0)}
.anteroom-in .anteroom-bar{background:#16a34a;animation:none}
.anteroom-in .anteroom-track{margin:.75rem 0 .25rem}
.anteroom-in .anteroom-info{display:none}
.anteroom-done{opacity:0;transition:opacity .4s}
@keyframes anteroom-shine{from{background-position:200% 0}to{background-position:-200% 0}}
@media (prefers-color-scheme:dark){.anteroom-card{background:#1e293b;color:#f1f5f9}.anteroom-in .anteroom-title{color:#4ade80}.anteroom-hint,.anteroom-info,.anteroom-note{color:#cbd5e1}.anteroom-track{background:#334155}}
@media (prefers-reduced-motion:reduce){.anteroom-bar,.anteroom-done{animation:none;transition:none}}`;

  function el(tag, name, parent) {
    const e = document.createElement(tag);
    e.className = 'anteroom-' + name;
    e.id = 'anteroom-' + name;
    if (parent) parent.appendChild(e);
    return e;
  }

  function show() {
    const build = () => {
      if (ui || state !== 'waiting') return;
      if (!document.getElementById('anteroom-style')) {
        const st = document.createElement('style');
        st.id = 'anteroom-style';
        // Under a nonce-based Content-Security-Policy the style needs the
        // nonce the page gave this script.
        if (me && me.nonce) st.nonce = me.nonce;
        st.textContent = CSS;
        (document.head || document.documentElement).appendChild(st);
      }
      const card = el('div', 'card');
      card.tabIndex = -1;
      const title = el('h2', 'title', card);
      title.textContent = T.waiting;
      const place = el('p', 'place', card);
      place.setAttribute('role', 'status');
      place.setAttribute('aria-live', 'polite');
      place.setAttribute('aria-atomic', 'true');
      const track = el('div', 'track', card);
      track.setAttribute('aria-hidden', 'true');
      const bar = el('div', 'progress', track);
      bar.className = 'anteroom-bar';
      const hint = el('p', 'hint', card);
      el('p', 'info', card).textContent = T.info;
      const noteEl = el('p', 'note', card);
      let target = null;
      try { target = opt('target', '') && document.querySelector(opt('target', '')); } catch (e) { /* bad selector */ }
      let root = target, saved = null;
      if (target) {
        saved = document.createDocumentFragment(); // keeps the app's nodes (and listeners)
        while (target.firstChild) saved.appendChild(target.firstChild);
        target.classList.add('anteroom-waiting');
      } else {
        root = el('div', 'overlay');
        root.setAttribute('role', 'dialog');
        root.setAttribute('aria-modal', 'true');
        root.setAttribute('aria-labelledby', 'anteroom-title');
        document.documentElement.classList.add('anteroom-lock');
      }
      root.appendChild(card);
      // Behind a modal overlay the page is inert: no focus, no clicks, not
      // read out. Only what was not inert already is given back on hide.
      const inerted = [];
      if (!target) {
        for (const n of Array.from(document.body.children)) {
          if (!n.inert && n.tagName !== 'SCRIPT' && n.tagName !== 'STYLE') {
            n.inert = true;
            inerted.push(n);
          }
        }
        document.body.appendChild(root);
      }
      ui = { root, card, target, saved, title, place, bar, hint, note: noteEl, inerted };
      if (!target) try { card.focus({ preventScroll: true }); } catch (e) { /* ok */ }
      render();
    };
    if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', build, { once: true });
    else build();
  }

  function hide() {
    if (!ui) return;
    const u = ui;
    ui = null;
    u.card.remove();
    if (u.target) {
      u.target.appendChild(u.saved);
      u.target.classList.remove('anteroom-waiting');
    } else {
      u.root.remove();
      u.inerted.forEach((n) => { n.inert = false; });
      document.documentElement.classList.remove('anteroom-lock');
    }
  }

  function note(t) {
    if (ui) ui.note.textContent = t;
  }

  // An estimate needs evidence: admittedPerMinute is over the last five
  // minutes, so at least 3 admissions in them (the sidecar itself reports 0
  // until they span a minute). One admission is no rate.
  const etaEvidence = (rate) => rate * 5 >= 3 - 1e-9;
  const eta = (min) => (min < 1 ? 'under a minute'
    : min < 90 ? 'about ' + Math.ceil(min) + ' min'
      : 'about ' + Math.round(min / 60) + ' h');

  function render() {
    if (!ui || !view || state !== 'waiting') return;
    const first = Number(view.firstWaitingPosition) || 0;
    const place = Math.max(1, Number(view.position) - first + 1) || 1;
    const total = Math.max(place, Number(view.lastWaitingPosition) - first + 1) || place;
    const waiting = Number(view.waiting) || 0;
    const rate = Number(view.admittedPerMinute) || 0;
    ui.place.textContent = fill(T.place, { place, total });
    // Positions count people who left; the real count corrects the estimate.
    let real = place;
    const hint = [];
    if (waiting > 0 && waiting < total) {
      hint.push(fill(T.left, { waiting }));
      real = Math.max(1, (place * waiting) / total);
    }
    if (etaEvidence(rate)) hint.push(fill(T.eta, { eta: eta(real / rate) }));
    ui.hint.textContent = hint.join(' ');
    maxPlace = Math.max(maxPlace, place);
    ui.bar.style.width = Math.max(4, (100 * (maxPlace - place)) / maxPlace) + '%';
  }

  // ---- API ------------------------------------------------------------------
  async function leave() {
    const was = state;
    stopNet();
    hide();
    state = 'left';
    emit('left', view);
    if (was !== 'left') {
      try { await api('POST', '/api/leave?gate=' + enc(gate)); } catch (e) { /* best effort */ }
    }
  }

  async function release() {
    stopNet();
    hide();
    state = 'left';
    emit('left', view);
    try { return (await api('POST', '/api/release?gate=' + enc(gate))).ok; } catch (e) { return false; }
  }

  window.anteroom = Object.freeze({
    get state() { return state; },
    get view() { return view; },
    gate,
    base,
    // join(): again after leave()/release(), or to refresh the view now.
    join() {
      if (state === 'left') state = 'joining';
      return state === 'active' ? Promise.resolve() : join();
    },
    leave, // gives up waiting (the server keeps the place for waiting_timeout)
    release, // ends an active session now; the next waiter gets the slot
    on(name, fn) {
      (listeners[name] = listeners[name] || []).push(fn);
      return () => {
        const a = listeners[name] || [];
        const i = a.indexOf(fn);
        if (i >= 0) a.splice(i, 1);
      };
    },
  });

  join();
})();
