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
 *                       (total: the people waiting)
 *   data-text-admitted  once admitted           "You're in!"
 *   data-text-info      under the place         "You'll be let in automatically - keep this tab open."
 *   data-text-left      {left}: people ahead of you who left the line
 *   data-text-eta       {eta}                   "Estimated wait: {eta}" (a range, "8-12 min")
 *   data-text-soon      the shortest ETA        "less than a minute"
 *   data-text-slower    why the ETA grew a lot  "Fewer people were let in over the last minutes."
 *   data-text-faster    why it shrank a lot     "More people were let in lately."
 *   data-text-retry     while the server is unreachable  "Reconnecting..."
 *   data-code           priority code (or ?anteroom_code=, then removed from the URL)
 *   data-text-code-bad, data-text-priority  (README: priority codes)
 *   data-text-opens, -draw-title, -draw, -draw-count, -draw-ahead, -starting, -drawing,
 *   -drawn              a scheduled event's pre-queue (README: scheduled events)
 *
 * Presence: hiding the tab is no departure. The socket stays open while the
 * tab is hidden and while admitted (an open socket is the session's sign of
 * life, and claims a promotion at once); where the browser killed it in the
 * background, the snippet asks for its status and reconnects on return,
 * which keeps the place. Only pagehide of a waiting page sends a leave.
 *
 * API: window.anteroom = {state, view, place, gate, base, join(), leave(), release(),
 *   on(event, fn), estimatePlace(globalView, position), estimatePlaceIn, servedBefore, codeError}
 *   state: "joining" | "waiting" | "active" | "left"; view: the last SessionView;
 *   place: the place shown while waiting (in its lane, view.lane).
 *   on("waiting"|"update"|"active"|"admission"|"left", fn(view)) returns an unsubscribe function;
 *   on("event", fn(ev)): the scheduled event shown (GET {base}/api/events), or null; anteroom.event.
 *   view.admission: the admission token (a JWT) at gates with admission tokens, once
 *   let in; "admission" fires when it arrives after "active" (a promotion).
 *   The same events are dispatched on document as CustomEvent "anteroom:<event>".
 * DOM: #anteroom-overlay (overlay root; or the target gets class anteroom-waiting),
 *   #anteroom-card, #anteroom-title, #anteroom-place (role=status), #anteroom-progress,
 *   #anteroom-countdown (role=timer), #anteroom-hint, #anteroom-info, #anteroom-note,
 *   <style id="anteroom-style">.
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
    left: opt('text-left', 'Some people ahead of you left the line.'),
    eta: opt('text-eta', 'Estimated wait: {eta}'),
    soon: opt('text-soon', 'less than a minute'),
    slower: opt('text-slower', 'Fewer people were let in over the last minutes.'),
    faster: opt('text-faster', 'More people were let in lately.'),
    retry: opt('text-retry', 'Reconnecting\u2026'),
    codeBad: opt('text-code-bad', 'Your code could not be used.'),
    priority: opt('text-priority', 'Priority line'),
    opens: opt('text-opens', 'The line opens in {time}'),
    drawTitle: opt('text-draw-title', "You're in the draw"),
    draw: opt('text-draw', 'Places in line are drawn at random at the start.'),
    drawCount: opt('text-draw-count', 'In the draw so far: {count}.'),
    drawAhead: opt('text-draw-ahead', 'Ahead of the draw (already waiting): {ahead}.'),
    starting: opt('text-starting', 'Opening\u2026'),
    drawing: opt('text-drawing', 'Drawing places\u2026'),
    drawn: opt('text-drawn', 'Places were drawn at random.'),
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
  // The place shown, and the last exact one the server counted (0: none).
  let place = 0, exact = 0, exactPos = 0;
  const listeners = {};
  // A priority code, sent with the first join only; kept out of the URL.
  let code = opt('code', ''), codeError = '';
  try {
    const u = new URL(location.href), q = u.searchParams;
    if (q.has('anteroom_code')) {
      code = code || q.get('anteroom_code');
      q.delete('anteroom_code');
      history.replaceState(history.state, '', u.pathname + u.search + u.hash);
    }
  } catch (e) { /* data-code only */ }

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
      const res = await api('POST', '/api/join', code ? { gate, code } : { gate });
      // 404 code_unknown / 409 code_used: joined all the same, body a view.
      const b = code && (res.status === 404 || res.status === 409) ? await readJSON(res) : null;
      if (isView(b) && b.error) {
        codeError = String(b.error.code);
        delete b.error;
      }
      if (res.ok || codeError) code = '';
      if (codeError && isView(b)) return onView(b, 1);
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
      onView(v, 1);
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

  // A full SessionView (join, status, or a "session" message). draw: the
  // answers say if the place is still to be drawn or was drawn; a session
  // message that moves a waiter in the draw is the draw.
  function onView(v, http) {
    if (v.token) token = v.token;
    if (http) v.draw = v.draw || '';
    else if (!v.draw && view && view.draw === 'pending' && num(v.position) !== num(view.position)) v.draw = 'drawn';
    if (state === 'active' && view && v.admission && v.admission !== view.admission) {
      view.admission = v.admission; // claimed after a promotion: the status carries it
      emit('admission', view);
    }
    if (state === 'left' || state === 'active') return;
    if (v.status === 'active') return admit(v);
    view = Object.assign({}, view, v);
    delete view.type;
    placeFrom(v, true);
    drawPending = false; // the exact place after a draw
    if (state !== 'waiting') {
      state = 'waiting';
      show();
      emit('waiting', view);
      loadEvents();
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
    clearTimeout(joinTimer);
    stopPoll();
    stopEvents();
    // Promoted, not yet claimed: a request naming the session claims it (the
    // open socket did already, if there is one).
    // A promotion notice carries no admission token: the status does.
    if (v.claimDeadline || (v.type === 'session' && !v.admission)) status(false);
    emit('active', view);
    const nav = navigate(wasWaiting);
    // The socket stays open while admitted (unless the page goes): its
    // close is the departure the sidecar's release_on_disconnect acts on.
    if (!nav) connect();
    if (!ui) return;
    ui.title.textContent = T.admitted;
    ui.place.textContent = T.admitted; // announced (live region), shown by the title
    ui.hint.textContent = ui.note.textContent = ui.count.firstChild.textContent = ui.count.lastChild.textContent = '';
    ui.count.hidden = true;
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
  const live = () => state === 'waiting' || state === 'active';
  async function connect() {
    if (ws || wsTimer || connecting || !live()) return;
    connecting = true;
    const ticket = await wsTicket();
    connecting = false;
    if (ws || wsTimer || !live()) return;
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
    // A socket stuck connecting (a browser that throttles or parks it) is
    // given up after 10s, so the retries and the polling go on.
    const stuck = setTimeout(() => {
      if (sock !== ws || opened) return;
      ws = null;
      try { sock.close(); } catch (e) { /* never opened */ }
      wsClosed();
    }, 10000);
    sock.onopen = () => {
      clearTimeout(stuck);
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
    if (!live()) return;
    wsFails++;
    if (wsFails >= 2 && state === 'waiting') startPoll();
    wsTimer = setTimeout(() => { wsTimer = 0; connect(); }, backoff(wsFails, 500, 30000));
  }

  function onGlobal(g) {
    if (state !== 'waiting' || (g.gate && g.gate !== gate)) return;
    view = Object.assign({}, view, g);
    delete view.type;
    if (!g.priority) delete view.priority; // the priority lane emptied
    placeFrom(g, false);
    render();
    emit('update', view);
    // The line moved past us: we were promoted (or purged). Ask, at most every 5s.
    const lv = laneView(view, view.lane);
    if ((!lv || view.position < num(lv.firstWaitingPosition)) && Date.now() - lastCheck > 5000) {
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
        if (isView(v)) onView(v, 1);
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
    stopEvents();
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
  // Hiding the tab is no departure: the socket stays open, and the sidecar
  // keeps the place for waiting_timeout after the last sign of life. Only
  // pagehide (the page unloaded, or put in the back/forward cache) of a
  // waiting page sends a leave. An active page sends none: its socket
  // closing is the departure (release_on_disconnect), and a leave would not
  // end it. The leave travels as a keepalive fetch, which outlives the page
  // and, unlike sendBeacon, carries the Authorization header; sendBeacon
  // (cookie only) is the fallback where keepalive fetch is missing.
  let departedAt = 0;
  function depart() {
    if (state !== 'waiting' || departed) return;
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
  }

  // Back: the tab visible again, the page restored from the back/forward
  // cache, the network back. The browser may have killed the socket in the
  // background: a status call (a sign of life, the exact place; a session
  // purged meanwhile joins again) and a reconnect. Joining again keeps the
  // place of a session that still exists.
  function back() {
    if (state === 'active') return reconnect();
    if (state !== 'waiting') return;
    if (departed) {
      departed = false;
      join();
      // The leave and this join travel independently: back soon after
      // leaving, join once more a little later (join is idempotent).
      if (Date.now() - departedAt < 2000) {
        setTimeout(() => { if (state === 'waiting' && !departed) join(); }, 1000);
      }
      return;
    }
    status(false);
    reconnect();
  }
  // Connect now, not at the end of a backoff that may have grown while the
  // socket kept failing in the background.
  function reconnect() {
    if (ws) return;
    clearTimeout(wsTimer);
    wsTimer = 0;
    connect();
  }

  addEventListener('pagehide', depart);
  addEventListener('pageshow', (e) => { if (e.persisted) back(); });
  addEventListener('online', back);
  document.addEventListener('resume', back);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') back();
  });

  // ---- UI -----------------------------------------------------------------
  const CSS = `
.anteroom-lock{overflow:hidden}
.anteroom-overlay{position:fixed;inset:0;z-index:2147483647;display:flex;align-items:center;justify-content:center;padding:1rem;background:rgba(15,23,42,.72)}
.anteroom-card{box-sizing:border-box;width:100%;max-width:26rem;margin:0 auto;padding:1.75rem 1.5rem;border-radius:12px;background:#fff;color:#0f172a;box-shadow:0 10px 40px rgba(0,0,0,.3);text-align:center;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;outline:none}
.anteroom-waiting .anteroom-card{box-shadow:0 2px 12px rgba(0,0,0,.12)}
.anteroom-title{margin:0 0 .5rem;font-size:1.35rem;font-weight:600}
.anteroom-place{margin:0 0 1rem;font-size:1.15rem;font-variant-numeric:tabular-nums}
.anteroom-place:empty{display:none}
.anteroom-countdown{margin:-.5rem 0 1rem}
.anteroom-countdown span{display:block;font-size:.95rem}
.anteroom-countdown strong{display:block;font-size:1.75rem;line-height:1.25;font-variant-numeric:tabular-nums}
.anteroom-countdown span:empty,.anteroom-countdown[hidden]{display:none}
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
      const count = el('p', 'countdown', card);
      count.setAttribute('role', 'timer'); // not live: read on demand, not every second
      count.append(document.createElement('span'), document.createElement('strong'));
      count.hidden = true;
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
      ui = { root, card, target, saved, title, place, count, bar, hint, note: noteEl, inerted };
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

  const num = (x) => Math.trunc(Number(x)) || 0;
  // Go's int64 division (truncating), exact beyond 2^53 where BigInt exists.
  const idiv = (a, b) => (typeof BigInt === 'function'
    ? Number(BigInt(a) / BigInt(b)) : Math.trunc(a / b));

  // estimatePlace is session.GlobalView.EstimatePlace, the same arithmetic:
  // the waiters of every bucket that ends before the position, plus a
  // rounded interpolation inside its own bucket, plus one; without buckets,
  // Convex's position - first + 1; 0 when the position is not in the line.
  function estimatePlace(g, position) {
    const first = num(g && g.firstWaitingPosition), last = num(g && g.lastWaitingPosition);
    position = num(position);
    if (!g || num(g.waiting) === 0 || position < first || position > last) return 0;
    const off = position - first;
    const b = Array.isArray(g.buckets) ? g.buckets.map(num) : [];
    if (b.length < 2) return off + 1;
    let ahead = 0;
    for (let i = 0; i + 1 < b.length; i += 2) {
      const start = b[i], count = b[i + 1];
      const end = i + 2 < b.length ? b[i + 2] - 1 : last - first;
      if (off > end) {
        ahead += count;
        continue;
      }
      if (off <= start || count <= 1 || end <= start) return ahead + 1;
      const span = end - start;
      return ahead + idiv(2 * (count - 1) * (off - start) + span, 2 * span) + 1;
    }
    return ahead + 1;
  }

  // A lane's part of a view (session/priority.go): the view for the normal
  // lane, view.priority for the priority lane (absent while empty).
  const laneView = (g, lane) => (lane === 'priority' ? (g && typeof g.priority === 'object' && g.priority) || null : g);
  // session.GlobalView.EstimatePlaceIn and ServedBefore (what the wait is on).
  function estimatePlaceIn(g, lane, position) {
    const lv = laneView(g, lane);
    return lv ? estimatePlace(lv, position) : 0;
  }
  const servedBefore = (g, lane, place) => num(place) +
    (lane === 'priority' || !g || !g.priority ? 0 : Math.max(0, num(g.priority.waiting)));

  // The place shown: the server's exact place from every SessionView (join,
  // status, session messages); between them, the estimate from the global
  // message, never above the last exact place (nobody gets ahead of a
  // waiter, so its place only goes down).
  function placeFrom(v, fromSession) {
    const p = num(v.place), pos = num(view.position);
    if (fromSession && p > 0) {
      exact = place = p;
      exactPos = pos;
      return;
    }
    const lv = laneView(view, view.lane);
    const est = estimatePlaceIn(view, view.lane, pos);
    if (est > 0) place = exact > 0 && exactPos === pos ? Math.min(exact, est) : est;
    else if (!place && lv) place = Math.max(1, num(view.position) - num(lv.firstWaitingPosition) + 1);
  }

  // An estimate needs evidence: the sidecar reports admittedPerMinute 0
  // until it has some (3 admissions over at least a minute of the last
  // five), and a rate below 3 in five minutes is none either.
  const etaEvidence = (rate) => rate > 0 && rate * 5 >= 3 - 1e-9;
  // A range of +-20% around place / rate, rounded outwards.
  function etaRange(min) {
    if (min < 1) return T.soon;
    const unit = min < 90 ? ' min' : ' h';
    const x = min < 90 ? min : min / 60;
    const lo = Math.max(1, Math.floor(x * 0.8));
    return lo + '\u2013' + Math.max(lo + 1, Math.ceil(x * 1.2)) + unit;
  }
  // The last ETA (minutes) and rate, to say why the ETA moved a lot.
  let etaLast = 0, rateLast = 0, why = '', whyUntil = 0;
  function etaLines(p, rate) {
    if (!etaEvidence(rate)) {
      etaLast = 0;
      return [];
    }
    const min = p / rate;
    if (etaLast > 0 && Math.abs(min - etaLast) > etaLast / 2) {
      if (min > etaLast && rate < rateLast) why = T.slower;
      else if (min < etaLast && rate > rateLast) why = T.faster;
      else why = '';
      whyUntil = Date.now() + 60000;
    }
    etaLast = min;
    rateLast = rate;
    const out = [fill(T.eta, { eta: etaRange(min) })];
    if (why && Date.now() < whyUntil) out.push(why);
    return out;
  }

  function render() {
    if (!ui || !view || state !== 'waiting') return;
    const p = Math.max(1, place);
    const lv = laneView(view, view.lane) || { waiting: p, firstWaitingPosition: view.position };
    const waiting = num(lv.waiting);
    const total = Math.max(p, waiting);
    // Before the start of a shuffled pre-queue nobody has a place: say so.
    // The answers say who is in a draw at once; the events add the count.
    const pre = ev && pending(ev) ? ev : null, lottery = view.draw === 'pending' && (!ev || pre);
    ui.title.textContent = lottery ? T.drawTitle : T.waiting;
    ui.place.textContent = drawPending ? T.drawing
      : lottery ? T.draw : fill(T.place, { place: p, total });
    countdown();
    const hint = [];
    if (view.lane === 'priority') hint.push(T.priority);
    if (codeError) hint.push(T.codeBad);
    if (lottery) {
      // The draw is among the normal lane's waiters from firstPosition on;
      // those before it keep their places (an estimate from the buckets).
      const fp = num(pre && pre.firstPosition);
      const ahead = fp > num(view.firstWaitingPosition) ? Math.max(0, estimatePlace(view, fp) - 1) : 0;
      if (pre) hint.push(fill(T.drawCount, { count: Math.max(1, num(view.waiting) - ahead) }));
      if (ahead > 0) hint.push(fill(T.drawAhead, { ahead }));
    } else if (!drawPending) {
      if (view.draw === 'drawn') hint.push(T.drawn);
      // People ahead left when the place is below Convex's upper bound.
      const left = num(view.position) - num(lv.firstWaitingPosition) + 1 - p;
      if (left > 0) hint.push(fill(T.left, { left }));
      // Nobody is let in before the start: no wait to estimate.
      if (evKnown && !pre) hint.push(...etaLines(servedBefore(view, view.lane, p), Number(view.admittedPerMinute) || 0));
    }
    ui.hint.textContent = hint.join(' ');
    maxPlace = lottery ? 0 : Math.max(maxPlace, p); // progress counts from the draw
    ui.bar.style.width = Math.max(4, (100 * (maxPlace - p)) / maxPlace) + '%';
  }

  // ---- a scheduled event: countdown and lottery -----------------------------
  // GET {base}/api/events (with the server's clock) when the wait starts: an
  // open pre-queue is counted down to its start; one opening within 6 h is
  // fetched again then. In a shuffled pre-queue nobody has a place before
  // the draw, so the card says so; once the draw is published, a status call
  // gives the real place. Fetches near the start are spread over seconds.
  let ev = null, evKnown = false, evTimer = 0, evFails = 0, tickTimer = 0, skew = 0;
  let drawPending = false, opening = 0;
  const pending = (e) => e.phase === 'prequeue' || e.phase === 'scheduled';
  // In the draw: a shuffled pre-queue, the normal lane, from its first position on.
  const jitter = (ms) => ms + Math.random() * 2500;

  function loadEvents() {
    clearTimeout(evTimer);
    evTimer = 0;
    if (state !== 'waiting') return;
    const t0 = Date.now();
    api('GET', '/api/events?positions=0&gate=' + enc(gate)) // not the whole pre-queue
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((v) => { evFails = 0; onEvents(v, (t0 + Date.now()) / 2); }, (code) => {
        evKnown = true;
        render();
        if (code !== 404 && state === 'waiting') evTimer = setTimeout(loadEvents, jitter(backoff(evFails++, 2000, 60000)));
      });
  }

  // v: the events answer; at: the local time its `now` was read.
  function onEvents(v, at) {
    if (state !== 'waiting') return;
    const now = Date.parse(v && v.now), prev = ev;
    let next = null, soon = Infinity;
    if (now > 0 && Array.isArray(v.events)) {
      skew = now - at;
      // The latest first; a started one while it is ours or new, or
      // while our place is its draw (draw "drawn": a late loader).
      for (const e of v.events.slice().reverse()) {
        const pq = Date.parse(e && e.prequeueAt), st = Date.parse(e && e.startsAt);
        if (!(pq > 0 && st > 0)) continue;
        if (pending(e) ? pq <= now : e.seed && (prev && prev.id === e.id || now - st < 60000 || view.draw === 'drawn')) {
          next = e;
          break;
        }
        if (e.phase === 'scheduled') soon = Math.min(soon, pq - now);
      }
    }
    ev = next;
    evKnown = true;
    if (ev && !pending(ev) && view.draw === 'pending') {
      // Drawn while we waited: the exact place comes with the status.
      view.draw = 'drawn';
      drawPending = true;
      status(false);
      setTimeout(() => { if (drawPending) { drawPending = false; render(); } }, 5000);
    }
    if (!prev !== !ev || ev && (prev.id !== ev.id || prev.phase !== ev.phase)) emit('event', ev);
    if (ev && pending(ev)) {
      // Due but not stored yet: its first position comes with the transition.
      if (ev.phase === 'scheduled') evTimer = setTimeout(loadEvents, jitter(1000));
      tick();
    } else if (soon < 6 * 3600e3) evTimer = setTimeout(loadEvents, jitter(soon));
    render();
  }

  // The time left, on the server's clock, as h:mm:ss or m:ss.
  function countdown() {
    const e = ev && pending(ev) ? ev : null;
    const ms = e ? Date.parse(e.startsAt) - (Date.now() + skew) : 0;
    if (!ui) return ms;
    const s = Math.ceil(ms / 1000), h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
    const two = (n) => (n < 10 ? '0' : '') + n;
    const [words, after] = !e ? ['', ''] : s <= 0 ? ['', T.starting]
      : fill(T.opens, { time: '\0' + (h ? h + ':' + two(m) : m) + ':' + two(s % 60) }).split('\0');
    ui.count.firstChild.textContent = words;
    ui.count.lastChild.textContent = after || '';
    ui.count.hidden = !after;
    return ms;
  }

  // Each second, on the second; at the start, the events again (spread out,
  // and slower while the start is not stored).
  function tick() {
    clearTimeout(tickTimer);
    tickTimer = 0;
    if (!ev || !pending(ev) || state !== 'waiting') return;
    const ms = countdown();
    if (ms > 0) {
      opening = 0;
      tickTimer = setTimeout(tick, (ms % 1000 || 1000) + 15);
    } else if (!evTimer) {
      evTimer = setTimeout(loadEvents, jitter(500 + backoff(opening++, 1000, 30000)));
    }
  }

  function stopEvents() {
    clearTimeout(evTimer);
    clearTimeout(tickTimer);
    evTimer = tickTimer = 0;
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
    get place() { return state === 'waiting' ? place : 0; },
    get codeError() { return codeError; },
    get event() { return ev; },
    estimatePlace,
    estimatePlaceIn,
    servedBefore,
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
