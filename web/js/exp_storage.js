/* exp_storage.js — checkpoint storage in the dashboard (docs/dashboard.md,
 * "Checkpoint storage"; the routes are in docs/scheduler.md, "The checkpoint
 * store" and "Checkpoint retention").
 *
 *   HF.fmtBytes(n)                      1536 -> "1.50 KiB"
 *   HF.exp.panels.storage(store, root)  the experiment page's lifecycle
 *       actions: Archive / Unarchive and Delete (confirmed) in the page head,
 *       enabled only for an experiment that runs nothing (COMPLETED,
 *       CANCELED, or PAUSED with no trial on an agent: what the scheduler
 *       accepts, else it answers 409), and a note on an archived one. The
 *       storage figure itself is the `checkpoints` stat of exp_head.js; this
 *       panel keeps checkpoint_bytes current (refetched after trial changes).
 *   HF.checkpoints.panel(trialId)       a trial's stored checkpoints (GET
 *       /trials/{id}/checkpoints: step, size, short SHA-256, time) and the
 *       copies its agent reported locally; each stored one downloads.
 *   HF.checkpoints.download(c, name)    GET /checkpoints/{sha256} with the
 *       user token (fetch, since a plain link cannot send the Authorization
 *       header), streamed into a Blob, its SHA-256 checked against the
 *       listed one before the browser saves it; a mismatch saves nothing.
 *
 * Invariants: no request is made after a panel's destroy; a download is
 * only handed to the browser when its size (and, where WebCrypto exists and
 * the object is at most VERIFY_MAX bytes, its hash) is the listed one.
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const VERIFY_MAX = 1024 * 1024 * 1024;   // crypto.subtle hashes in memory
  const BYTES_EVERY_MS = 5000;              // checkpoint_bytes refetch, at most
  const STORE_PATH = /^objects\/[0-9a-f]{2}\/[0-9a-f]{64}$/;   // a stored row's path

  HF.fmtBytes = function (n) {
    if (n == null || !isFinite(n)) return '–';
    if (n < 1024) return n + ' B';
    const units = ['KiB', 'MiB', 'GiB', 'TiB'];
    let v = n / 1024, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return v.toFixed(2) + ' ' + units[u];
  };

  const ck = HF.checkpoints = {};

  /* The browser's file name for a stored checkpoint: like the CLI's
   * ckpt-STEP.hfck, prefixed with the trial. */
  ck.fileName = (trialId, c) => `trial-${trialId}-ckpt-${String(c.step).padStart(12, '0')}.hfck`;

  const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');

  /* Fetches c.sha256 (a row of the list route) with the token; onProgress(got,
   * total). RET the verified Blob and whether its hash was checked; throws
   * an Error naming what is wrong. A 401 opens the login prompt and retries. */
  ck.fetchBlob = async function (c, onProgress) {
    for (;;) {
      const tok = HF.api.token();
      let res;
      try {
        res = await fetch('/api/v1/checkpoints/' + encodeURIComponent(c.sha256), { headers: tok ? { Authorization: 'Bearer ' + tok } : {} });
      } catch (e) { throw new Error('network error: ' + e.message); }
      if (res.status === 401) { await HF.api.login(tok ? 'The token was refused; enter a valid user token.' : null); continue; }
      if (!res.ok) {
        let msg = 'HTTP ' + res.status;
        try { const j = JSON.parse(await res.text()); if (j && j.error) msg = j.error; } catch (e) { /* keep the status */ }
        throw new Error(msg);
      }
      const total = +(res.headers.get('Content-Length') || c.size || 0);
      const parts = [];
      let got = 0;
      const rd = res.body.getReader();
      for (;;) {
        const { done, value } = await rd.read();
        if (done) break;
        parts.push(value); got += value.length;
        if (onProgress) onProgress(got, total);
      }
      if (c.size != null && got !== c.size) throw new Error(`truncated: ${got} of ${c.size} bytes`);
      const blob = new Blob(parts, { type: 'application/octet-stream' });
      const subtle = window.crypto && window.crypto.subtle;
      if (!subtle || got > VERIFY_MAX) return { blob, verified: false };
      const sum = hex(await subtle.digest('SHA-256', await blob.arrayBuffer()));
      if (sum !== c.sha256) throw new Error(`SHA-256 mismatch: got ${sum.slice(0, 12)}…, listed ${c.sha256.slice(0, 12)}…`);
      return { blob, verified: true };
    }
  };

  /* Downloads c and hands it to the browser as `name`; btn shows progress. */
  ck.download = async function (c, name, btn) {
    const label = btn ? btn.textContent : '';
    if (btn) btn.disabled = true;
    try {
      const r = await ck.fetchBlob(c, (got, total) => {
        if (btn) btn.textContent = total ? Math.floor((100 * got) / total) + ' %' : HF.fmtBytes(got);
      });
      const url = URL.createObjectURL(r.blob);
      const a = h('a', { href: url, download: name, hidden: true });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      HF.toast(`${name}: ${HF.fmtBytes(c.size)}, ` + (r.verified ? 'SHA-256 verified' :
        'not verified here (no WebCrypto on this origin, or over 1 GiB: use `hyperfarm download`)'));
    } catch (e) {
      HF.toast(`download of ${name} failed: ${e.message}`, true);
    } finally {
      if (btn) { btn.disabled = false; btn.textContent = label; }
    }
  };

  /* The trial page's Checkpoints section. RET {el, refresh(t), destroy()}:
   * refresh(t) (t: the trial summary) refetches the stored list and redraws
   * with t's locally reported rows. */
  ck.panel = function (trialId) {
    let closed = false, stored = [], local = [], err = '', seq = 0;
    const body = h('tbody');
    const note = h('span.hint#checkpoints-note');
    const table = h('table.data#checkpoints',
      h('thead', h('tr', h('th.num', 'step'), h('th.num', 'size'), h('th', 'sha256'), h('th', 'time'), h('th.num', 'attempt'), h('th', ''))), body);
    const el = h('section.panel', h('div.panel-head', h('h2', 'Checkpoints'), note),
      h('div.table-wrap', { style: { maxHeight: '260px' } }, table));

    function render() {
      const rows = stored.slice().sort((a, b) => (b.step - a.step) || (b.time - a.time)).map((c) =>
        h('tr', { 'data-sha256': c.sha256, 'data-step': c.step },
          h('td.num', String(c.step)), h('td.num', HF.fmtBytes(c.size)),
          h('td.mono', { title: c.sha256 }, c.sha256.slice(0, 12)),
          h('td', HF.fmtTime(c.time)), h('td.num', String(c.attempt)),
          h('td', h('button.btn.small', { 'data-action': 'download', title: 'download, SHA-256 verified',
            onclick: (ev) => ck.download(c, ck.fileName(trialId, c), ev.currentTarget) }, 'Download'))));
      // Copies the agent reported by path (not in the store: not downloadable here).
      for (const c of local) {
        rows.push(h('tr.muted', h('td.num', HF.fmtVal(c.step)), h('td.num', '–'),
          h('td', { title: c.path }, 'on the agent'), h('td', HF.fmtTime(c.time)),
          h('td.num', c.attempt != null ? String(c.attempt) : ''), h('td.mono', c.path)));
      }
      body.replaceChildren(...rows);
      if (!rows.length) body.replaceChildren(h('tr', h('td.empty', { colspan: 6 }, err || 'no checkpoints')));
      const bytes = stored.reduce((s, c) => s + (c.size || 0), 0);
      note.textContent = stored.length ? `${stored.length} stored, ${HF.fmtBytes(bytes)}` + (err ? ' · ' + err : '') : err;
      table.dataset.loaded = '1';
    }

    async function refresh(t) {
      if (closed) return;
      // Stored rows carry their object's path in the store; only the others
      // are copies on the agent.
      local = ((t && t.checkpoints) || []).filter((c) => c.path && !STORE_PATH.test(c.path))
        .sort((a, b) => (b.step || 0) - (a.step || 0));
      const my = ++seq;
      try {
        const r = await HF.api.get(`/api/v1/trials/${trialId}/checkpoints`);
        if (closed || my !== seq) return;
        stored = r.checkpoints || []; err = '';
      } catch (e) {
        if (closed || my !== seq) return;
        // 503: the scheduler runs without a checkpoint store.
        err = e.status === 503 ? 'no checkpoint store on this scheduler' : 'list unavailable: ' + e.message;
        stored = [];
      }
      render();
    }
    return { el, refresh, destroy: () => { closed = true; } };
  };

  /* Can the scheduler archive / delete e now (docs/scheduler.md)? */
  const idle = (e) => {
    const c = e.counts || {};
    return e.state === 'COMPLETED' || e.state === 'CANCELED' || e.state === 'FAILED' ||
      (e.state === 'PAUSED' && !(c.running || 0) && !(c.assigned || 0));
  };

  HF.exp.panels.storage = function (store, root) {
    const id = store.id;
    const actions = h('span.row#exp-lifecycle');
    const note = h('div.archived-note#exp-archived-note', { hidden: true });
    const head = root.querySelector('.page-head');
    (head || root).appendChild(actions);
    root.appendChild(note);

    async function archive(verb) {
      const e = store.exp;
      const bytes = HF.fmtBytes(e.checkpoint_bytes || 0);
      if (verb === 'archive' && !confirm(`Archive experiment ${id} (${e.name || ''})? Its trials and results stay; ` +
        `all its checkpoints (${bytes}) are deleted and it is hidden from the list.`)) return;
      const r = await HF.api.act(`${verb} experiment ${id}`, () => HF.api.post(`/api/v1/experiments/${id}/${verb}`));
      if (r) {
        if (verb === 'unarchive') r.archived = false;
        store.mergeExp(r);
      }
    }
    async function del() {
      const e = store.exp;
      if (!confirm(`Delete experiment ${id} (${e.name || ''}) for good? Its trials, metrics, logs and ` +
        `checkpoints (${HF.fmtBytes(e.checkpoint_bytes || 0)}) are removed. This cannot be undone.`)) return;
      const r = await HF.api.act(`delete experiment ${id}`, () => HF.api.req('DELETE', `/api/v1/experiments/${id}`));
      if (r) location.hash = '#/experiments';
    }

    function render() {
      const e = store.exp;
      if (!e) return;
      const ok = idle(e);
      const why = ok ? '' : 'only an experiment that runs nothing (completed, canceled, or paused with no trial on an agent)';
      actions.replaceChildren(
        HF.guard(e.archived
          ? h('button.btn.small', { 'data-action': 'unarchive', onclick: () => archive('unarchive') }, 'Unarchive')
          : h('button.btn.small', { 'data-action': 'archive', disabled: !ok, title: why || 'delete its checkpoints, hide it from the list', onclick: () => archive('archive') }, 'Archive'), e),
        HF.guard(h('button.btn.small.danger', { 'data-action': 'delete', disabled: !ok, title: why || 'delete the experiment and everything it stored', onclick: del }, 'Delete'), e));
      note.hidden = !e.archived && !e.deleted;
      note.textContent = e.deleted ? 'This experiment was deleted.' :
        'Archived: its checkpoints are deleted and it is hidden from the experiment list (“show archived” lists it).';
    }
    // The live `experiment` events carry no checkpoint_bytes: uploads and
    // retention move it while trials change, so refetch it then (throttled).
    let closed = false;
    const bytesSoon = HF.throttle(async () => {
      try {
        const r = await HF.api.get('/api/v1/experiments/' + id);
        if (!closed && store.exp && r.checkpoint_bytes !== store.exp.checkpoint_bytes) store.mergeExp({ checkpoint_bytes: r.checkpoint_bytes });
      } catch (e) { /* the head keeps the last figure */ }
    }, BYTES_EVERY_MS);
    const offs = [store.on('all', render), store.on('exp', render), store.on('trial', bytesSoon)];
    return () => { closed = true; bytesSoon.cancel(); offs.forEach((f) => f && f()); };
  };
})(window.HF);
