/* api.js — the REST client and the live event stream.
 *
 * Every request carries `Authorization: Bearer TOKEN` when a token is stored
 * (localStorage 'hyperfarm.token'). A 401 opens the login prompt; all
 * requests that got a 401 meanwhile wait on that one prompt and are retried
 * once with the new token. Errors come back as ApiError {status, error, field}
 * with the scheduler's JSON body (docs/protocol.md).
 *
 * HF.live holds one EventSource on /api/v1/events (?token= because
 * EventSource cannot set headers) and fans events out to the handlers pages
 * register with HF.live.on(type, fn) (which returns the off function).
 */
'use strict';
(function (HF) {
  const KEY = 'hyperfarm.token';
  const api = HF.api = {};

  api.token = () => { try { return localStorage.getItem(KEY) || ''; } catch (e) { return ''; } };
  api.setToken = (t) => {
    try { if (t) localStorage.setItem(KEY, t); else localStorage.removeItem(KEY); } catch (e) { /* private mode */ }
    document.getElementById('logout').hidden = !t;
  };

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error) || ('HTTP ' + status));
      this.status = status; this.error = body && body.error; this.field = body && body.field; this.body = body;
    }
  }
  api.ApiError = ApiError;

  /* One login prompt at a time; resolves when the user submitted a token. */
  let loginWait = null;
  api.login = function (message) {
    if (loginWait) return loginWait;
    const dlg = document.getElementById('login');
    const input = document.getElementById('login-token');
    const err = document.getElementById('login-error');
    err.hidden = !message; err.textContent = message || '';
    input.value = '';
    loginWait = new Promise((resolve) => {
      const form = document.getElementById('login-form');
      const onSubmit = (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) return;
        form.removeEventListener('submit', onSubmit);
        dlg.removeEventListener('cancel', onCancel);
        api.setToken(t);
        dlg.close();
        loginWait = null;
        api.whoami().finally(() => resolve(t));
        HF.live.restart();
      };
      const onCancel = (ev) => ev.preventDefault();   // no way around the prompt
      form.addEventListener('submit', onSubmit);
      dlg.addEventListener('cancel', onCancel);
      if (!dlg.open) dlg.showModal();
      setTimeout(() => input.focus(), 0);
    });
    return loginWait;
  };

  /* body: undefined, a string or object (sent as JSON), or a Blob (sent
   * as application/octet-stream); extra: more request headers. */
  api.req = async function (method, path, body, extra) {
    for (let attempt = 0; ; attempt++) {
      const headers = Object.assign({ Accept: 'application/json' }, extra || {});
      const tok = api.token();
      const raw = body instanceof Blob;
      if (tok) headers.Authorization = 'Bearer ' + tok;
      if (body !== undefined) headers['Content-Type'] = raw ? 'application/octet-stream' : 'application/json';
      let res;
      try {
        res = await fetch(path, { method, headers, body: body === undefined ? undefined : (raw || typeof body === 'string' ? body : JSON.stringify(body)) });
      } catch (e) {
        throw new ApiError(0, { error: 'network error: ' + e.message });
      }
      if (res.status === 401) {
        // Ask (again) and retry; every request waiting here shares one prompt.
        await api.login(tok ? 'The token was refused; enter a valid user token.' : null);
        continue;
      }
      // every answer of a scheduler with replication says its role
      // (docs/scheduler.md); replication.js asks for more only then
      const role = res.headers.get('X-Hyperfarm-Role');
      if (role) api.role = role;
      const text = await res.text();
      let json = null;
      if (text) { try { json = JSON.parse(text); } catch (e) { json = { error: text.slice(0, 200) }; } }
      if (!res.ok) throw new ApiError(res.status, json);
      return json;
    }
  };
  /* X-Hyperfarm-Role of the last answer that had one ('' = none seen:
   * a scheduler without replication). */
  api.role = '';
  api.get = (p) => api.req('GET', p);
  api.post = (p, b) => api.req('POST', p, b === undefined ? {} : b);

  /* ---- code contexts (docs/dashboard.md, "New experiment") ------------ */

  /* SHA-256 of bytes (Uint8Array) as hex, in plain JS: crypto.subtle exists
   * only in secure contexts (https, localhost), and a dashboard served over
   * plain http from another host must still name its context. The round
   * constants are computed from the primes, as FIPS 180-4 defines them. */
  HF.sha256js = function (bytes) {
    const K = [], H = [];
    for (let n = 2, found = 0; found < 64; n++) {
      let prime = true;
      for (let d = 2; d * d <= n; d++) if (n % d === 0) { prime = false; break; }
      if (!prime) continue;
      if (found < 8) H[found] = (Math.pow(n, 1 / 2) * 4294967296) | 0;
      K[found++] = (Math.pow(n, 1 / 3) * 4294967296) | 0;
    }
    const len = bytes.length, nblk = ((len + 8) >> 6) + 1, w = new Int32Array(nblk * 16);
    for (let i = 0; i < len; i++) w[i >> 2] |= bytes[i] << (24 - 8 * (i & 3));
    w[len >> 2] |= 0x80 << (24 - 8 * (len & 3));
    w[nblk * 16 - 1] = len * 8;
    w[nblk * 16 - 2] = Math.floor(len / 536870912);
    const W = new Int32Array(64), rot = (x, n) => (x >>> n) | (x << (32 - n));
    for (let b = 0; b < nblk; b++) {
      for (let t = 0; t < 64; t++) {
        if (t < 16) W[t] = w[b * 16 + t];
        else {
          const a = W[t - 15], c = W[t - 2];
          W[t] = (W[t - 16] + (rot(a, 7) ^ rot(a, 18) ^ (a >>> 3)) + W[t - 7] + (rot(c, 17) ^ rot(c, 19) ^ (c >>> 10))) | 0;
        }
      }
      let [a, bb, c, d, e, f, g, hh] = H;
      for (let t = 0; t < 64; t++) {
        const t1 = (hh + (rot(e, 6) ^ rot(e, 11) ^ rot(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
        const t2 = ((rot(a, 2) ^ rot(a, 13) ^ rot(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c))) | 0;
        hh = g; g = f; f = e; e = (d + t1) | 0; d = c; c = bb; bb = a; a = (t1 + t2) | 0;
      }
      [a, bb, c, d, e, f, g, hh].forEach((v, i) => { H[i] = (H[i] + v) | 0; });
    }
    return H.map((v) => (v >>> 0).toString(16).padStart(8, '0')).join('');
  };

  /* The largest context the dashboard hashes (it reads the file whole);
   * the CLI's default cap (hyperfarm submit --max-context-mb). */
  api.CONTEXT_MAX_BYTES = 64 << 20;

  /* Upload the code context file (a .tar.gz) unless the scheduler has it
   * already: SHA-256 here (crypto.subtle.digest, else HF.sha256js), HEAD
   * /api/v1/contexts/{sha256}, then PUT /api/v1/contexts.
   * RET {sha256, size, uploaded}; throws ApiError. */
  api.uploadContext = async function (file) {
    if (file.size > api.CONTEXT_MAX_BYTES)
      throw new ApiError(0, { error: `${file.name} is larger than ${api.CONTEXT_MAX_BYTES >> 20} MiB (use hyperfarm submit --context)` });
    const buf = await file.arrayBuffer();
    const b = new Uint8Array(buf);
    if (b.length < 2 || b[0] !== 0x1f || b[1] !== 0x8b)
      throw new ApiError(0, { error: `${file.name} is not a gzip'd tar (.tar.gz)` });
    const sha = window.crypto && crypto.subtle
      ? Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', buf)), (x) => x.toString(16).padStart(2, '0')).join('')
      : HF.sha256js(b);
    try {
      await api.req('HEAD', '/api/v1/contexts/' + sha);
      return { sha256: sha, size: b.length, uploaded: false };
    } catch (e) { if (e.status !== 404) throw e; }
    const r = await api.req('PUT', '/api/v1/contexts', new Blob([buf]), { 'X-Hyperfarm-Sha256': sha });
    return { sha256: r.sha256, size: r.size, uploaded: true };
  };

  /* ---- who this token is (docs/dashboard.md, "Roles") ------------------
   * HF.me = {user, role, tokens} from GET /api/v1/whoami, loaded at start
   * and after every login/logout; null until then (nothing is disabled:
   * the scheduler decides anyway). Buttons for what the token may not do
   * are disabled with the reason as their tooltip (HF.guard). */
  HF.me = null;
  api.whoami = async function () {
    try { HF.me = await api.get('/api/v1/whoami'); }
    catch (e) { HF.me = null; }   // an older scheduler: no route
    const who = document.getElementById('whoami');
    if (who) {
      who.hidden = !HF.me || !HF.me.tokens;
      who.textContent = HF.me ? `${HF.me.user} · ${HF.me.role}` : '';
    }
    return HF.me;
  };
  /* The owner of experiment e: its owner, else its submitter, else
   * "default" (docs/api.md "Roles"). */
  HF.ownerOf = (e) => (e && (e.owner || e.submitted_by)) || 'default';
  /* '' when this token may change experiment e (or, e undefined, submit
   * new work) on this scheduler, else why not. */
  HF.whyNot = function (e) {
    const ro = HF.repl ? HF.repl.readOnly() : '';   // a standby takes no writes (replication.js)
    if (ro) return ro;
    const me = HF.me;
    if (!me || me.role === 'admin') return '';
    if (me.role === 'viewer') return `you are the viewer ${me.user}: a viewer may only read`;
    if (me.role !== 'user') return `a ${me.role} token may only read`;
    if (e === undefined) return '';
    const owner = HF.ownerOf(e);
    return owner === me.user ? '' : `owned by ${owner}: only its owner or an admin may change it`;
  };
  /* Disable el (a button, input) when the token may not change e, with
   * the reason as its tooltip; returns el. */
  HF.guard = function (el, e) {
    const why = HF.whyNot(e);
    if (why) {
      el.disabled = true;
      el.title = why;
      el.dataset.denied = '1';
      el.classList.add('denied');
    }
    return el;
  };

  /* Action helper for buttons: runs, toasts the error, returns the result. */
  api.act = async function (label, fn) {
    try { const r = await fn(); HF.toast(label + ': done'); return r; }
    catch (e) { HF.toast(label + ' failed: ' + e.message, true); return null; }
  };

  /* ---- live events ---------------------------------------------------- */
  const live = HF.live = { es: null, handlers: {}, connected: false, retry: 1000, count: 0 };
  const TYPES = ['experiment', 'trial', 'agent', 'metric'];
  const badge = () => document.getElementById('live');

  function setState(on, text) {
    live.connected = on;
    const b = badge();
    if (!b) return;
    b.className = 'live ' + (on ? 'on' : 'off');
    b.textContent = text || (on ? 'live' : 'offline');
  }

  live.on = function (type, fn) {
    (live.handlers[type] = live.handlers[type] || new Set()).add(fn);
    return () => live.handlers[type].delete(fn);
  };
  live.emit = function (type, data) {
    const hs = live.handlers[type];
    if (!hs) return;
    for (const fn of hs) { try { fn(data); } catch (e) { console.error('live handler', type, e); } }
  };

  live.restart = function () {
    if (live.es) { live.es.close(); live.es = null; }
    clearTimeout(live.timer);
    const tok = api.token();
    const url = '/api/v1/events' + (tok ? '?token=' + encodeURIComponent(tok) : '');
    const es = live.es = new EventSource(url);
    es.onopen = () => { live.retry = 1000; setState(true); live.emit('open', null); };
    es.onerror = () => {
      if (live.es !== es) return;
      if (es.readyState === EventSource.CLOSED) {
        // The server answered with an error status (401, 5xx) or refused:
        // probe with a normal request (opens the login prompt on 401), then retry.
        setState(false);
        es.close(); live.es = null;
        api.get('/api/v1/agents').catch(() => {});
        live.timer = setTimeout(live.restart, live.retry);
        live.retry = Math.min(live.retry * 2, 15000);
      } else {
        setState(false, 'reconnecting');
      }
    };
    for (const t of TYPES) {
      es.addEventListener(t, (ev) => {
        let d;
        try { d = JSON.parse(ev.data); } catch (e) { return; }
        live.count++;
        live.emit(t, d);
      });
    }
  };
})(window.HF);
