/* util.js — small helpers shared by every page: DOM building, escaping,
 * number/time formatting, throttling. Everything hangs off window.HF so the
 * page needs no module loader (classic scripts run whatever MIME type the
 * server sends). */
'use strict';
window.HF = window.HF || {};

(function (HF) {
  /* h('div.cls#id', {attr: v, onclick: fn}, child, ...) -> Element. */
  HF.h = function (sel, attrs, ...kids) {
    const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(sel) || [];
    const el = document.createElement(m[1] || 'div');
    (m[2] || '').replace(/([.#])([\w-]+)/g, (_, k, v) => {
      if (k === '.') el.classList.add(v); else el.id = v;
    });
    if (attrs != null && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
      kids.unshift(attrs); attrs = null;
    }
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'html') el.innerHTML = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
      else el.setAttribute(k, v === true ? '' : v);
    }
    const add = (c) => {
      if (c == null || c === false) return;
      if (Array.isArray(c)) c.forEach(add);
      else el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    };
    kids.forEach(add);
    return el;
  };

  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  HF.esc = (s) => String(s == null ? '' : s).replace(/[&<>"']/g, (c) => ESC[c]);

  /* Numbers: 4 significant digits, exponent for very small/large. */
  HF.fmtNum = function (v, digits) {
    if (v == null || v === '') return '';
    if (typeof v !== 'number') return String(v);
    if (!isFinite(v)) return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e7) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e7)) return v.toExponential((digits || 4) - 1);
    return String(Number(v.toPrecision(digits || 4)));
  };
  HF.fmtVal = (v) => (typeof v === 'number' ? HF.fmtNum(v) : (v == null ? '' : String(v)));

  /* Every objective of an experiment summary ([{metric, goal}]): its
   * `objectives` for a multi-objective one, else its one `objective`. */
  HF.objectives = (e) => (e && Array.isArray(e.objectives) && e.objectives.length ? e.objectives
    : (e && e.objective && e.objective.metric ? [e.objective] : []));
  /* "acc ↑ · loss ↓" */
  HF.objectivesText = (e) => HF.objectives(e).map((o) => `${o.metric} ${o.goal === 'minimize' ? '↓' : '↑'}`).join(' · ');

  const pad = (n) => String(n).padStart(2, '0');
  HF.fmtTime = function (ms) {
    if (ms == null) return '';
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  };
  HF.fmtClock = function (ms) {
    if (ms == null) return '';
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
  };
  HF.fmtDur = function (ms) {
    if (ms == null || ms < 0) return '';
    const s = Math.round(ms / 1000);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + pad(s % 60) + 's';
    return Math.floor(s / 3600) + 'h ' + pad(Math.floor((s % 3600) / 60)) + 'm';
  };
  HF.fmtAgo = function (ms) {
    if (ms == null) return 'never';
    const d = Date.now() - ms;
    if (d < 1500) return 'just now';
    return HF.fmtDur(d) + ' ago';
  };

  /* Calls fn at most once per `ms`, always running the last call (trailing). */
  HF.throttle = function (fn, ms) {
    let timer = null, last = 0, pending = false;
    const run = () => { timer = null; last = Date.now(); pending = false; fn(); };
    const t = function () {
      pending = true;
      if (timer) return;
      const wait = Math.max(0, last + (typeof ms === 'function' ? ms() : ms) - Date.now());
      timer = setTimeout(run, wait);
    };
    t.cancel = () => { if (timer) clearTimeout(timer); timer = null; pending = false; };
    t.flush = () => { if (pending) { t.cancel(); run(); } };
    return t;
  };

  /* Runs async fn over items with at most `limit` in flight. */
  HF.pool = async function (items, limit, fn, isCancelled) {
    let i = 0;
    const worker = async () => {
      while (i < items.length) {
        if (isCancelled && isCancelled()) return;
        const item = items[i++];
        try { await fn(item); } catch (e) { if (e && e.status === 401) throw e; }
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  };

  HF.toast = function (msg, bad) {
    const t = document.getElementById('toast');
    t.textContent = msg; t.className = 'toast' + (bad ? ' bad' : ''); t.hidden = false;
    clearTimeout(HF.toast._t);
    HF.toast._t = setTimeout(() => { t.hidden = true; }, bad ? 6000 : 3000);
  };

  HF.badge = (state) => HF.h('span.badge.' + String(state || 'UNKNOWN').replace(/[^\w-]/g, ''), state || '?');

  HF.TERMINAL = new Set(['COMPLETED', 'FAILED', 'STOPPED', 'CANCELED']);

  /* Stable palette for trial curves, by trial id. */
  const PALETTE = ['#2f6fed', '#e8590c', '#1f9d55', '#c2255c', '#7048e8', '#0c8599', '#e67700', '#5c940d',
    '#d6336c', '#1971c2', '#862e9c', '#2b8a3e', '#f08c00', '#364fc7', '#a61e4d', '#087f5b'];
  HF.color = (i) => PALETTE[Math.abs(i | 0) % PALETTE.length];

  /* Sorting comparator that puts null/undefined last, numbers numerically,
   * strings naturally. */
  HF.cmp = function (a, b) {
    const an = a == null || a === '', bn = b == null || b === '';
    if (an || bn) return an === bn ? 0 : (an ? 1 : -1);
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  };

  /* Metric keys that are axes, not metrics. */
  HF.AXIS_KEYS = new Set(['step', 'epoch', 'time', 'seq', 'checkpoint']);
  HF.metricNames = function (obj) {
    return Object.keys(obj || {}).filter((k) => !HF.AXIS_KEYS.has(k) && typeof obj[k] === 'number');
  };
})(window.HF);
