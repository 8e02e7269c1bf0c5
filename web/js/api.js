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
        resolve(t);
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

  api.req = async function (method, path, body) {
    for (let attempt = 0; ; attempt++) {
      const headers = { Accept: 'application/json' };
      const tok = api.token();
      if (tok) headers.Authorization = 'Bearer ' + tok;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      let res;
      try {
        res = await fetch(path, { method, headers, body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)) });
      } catch (e) {
        throw new ApiError(0, { error: 'network error: ' + e.message });
      }
      if (res.status === 401) {
        // Ask (again) and retry; every request waiting here shares one prompt.
        await api.login(tok ? 'The token was refused; enter a valid user token.' : null);
        continue;
      }
      const text = await res.text();
      let json = null;
      if (text) { try { json = JSON.parse(text); } catch (e) { json = { error: text.slice(0, 200) }; } }
      if (!res.ok) throw new ApiError(res.status, json);
      return json;
    }
  };
  api.get = (p) => api.req('GET', p);
  api.post = (p, b) => api.req('POST', p, b === undefined ? {} : b);

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
