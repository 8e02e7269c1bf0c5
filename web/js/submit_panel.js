/* submit_panel.js — the submit panel of #/experiments (page_experiments.js
 * places it above the list): paste or upload an experiment file, attach a
 * code context (a .tar.gz uploaded once and named in "context"), submit it,
 * or submit a fork of an experiment (workflow.js hands the fork over
 * through HF.takeFork). Submission errors are shown next to the offending
 * field: the API answers {"error", "field"} and the field path is located
 * in the pasted text by a small position-tracking JSON scanner (jsonLocate).
 *
 *   HF.submitPanel(onSubmitted) -> {el, toggleNew}
 *     el           the panel (hidden until toggled; open when a fork waits)
 *     toggleNew()  "New experiment": show or hide the editor, not as a fork
 *     onSubmitted(r) is called with the API's answer after each submission. */
'use strict';
(function (HF) {
  const h = HF.h;

  const EXAMPLE = {
    name: 'fmnist-mlp-random',
    objective: { metric: 'val_acc', goal: 'maximize' },
    searcher: { name: 'random', max_trials: 8, max_concurrent_trials: 2 },
    hyperparameters: {
      lr: { type: 'log', min: 1e-4, max: 0.3 },
      hidden: { type: 'int', min: 64, max: 512 },
      optimizer: { type: 'categorical', values: ['sgd', 'adam'] },
      batch_size: 128,
    },
    trial: {
      command: ['hyperfarm-train', '--model', 'mlp', '--epochs', '3'],
      resources: { workers: 1, slots_per_worker: 1 },
      max_restarts: 1,
    },
  };

  /* Maps each JSON path ("searcher.max_trials", "trial.command.0") of `text`
   * to the character range of its key (members) or value (array elements).
   * Stops quietly at the first syntax error, keeping what it found. */
  function jsonLocate(text) {
    const locs = new Map();
    let i = 0;
    const n = text.length;
    const ws = () => { while (i < n && (text[i] === ' ' || text[i] === '\n' || text[i] === '\r' || text[i] === '\t')) i++; };
    const str = () => {
      const s = i++;
      while (i < n && text[i] !== '"') { if (text[i] === '\\') i++; i++; }
      i++;
      return [s, i];
    };
    const value = (path, depth) => {
      if (depth > 64) throw new Error('deep');
      ws();
      const c = text[i];
      if (c === '{') {
        i++; ws();
        if (text[i] === '}') { i++; return; }
        for (;;) {
          ws();
          if (text[i] !== '"') throw new Error('key');
          const [ks, ke] = str();
          let key;
          try { key = JSON.parse(text.slice(ks, ke)); } catch (e) { throw new Error('key'); }
          const p = path.concat(key);
          ws();
          if (text[i] !== ':') throw new Error(':');
          i++;
          locs.set(p.join('.'), { start: ks, end: ke });
          value(p, depth + 1);
          ws();
          if (text[i] === ',') { i++; continue; }
          if (text[i] === '}') { i++; return; }
          throw new Error('}');
        }
      } else if (c === '[') {
        i++; ws();
        if (text[i] === ']') { i++; return; }
        for (let k = 0; ; k++) {
          ws();
          const p = path.concat(String(k));
          const vs = i;
          value(p, depth + 1);
          if (!locs.has(p.join('.'))) locs.set(p.join('.'), { start: vs, end: i });
          ws();
          if (text[i] === ',') { i++; continue; }
          if (text[i] === ']') { i++; return; }
          throw new Error(']');
        }
      } else if (c === '"') {
        str();
      } else {
        const s = i;
        while (i < n && !/[\s,\]}]/.test(text[i])) i++;
        if (i === s) throw new Error('value');
      }
    };
    try { value([], 0); } catch (e) { /* partial map */ }
    return locs;
  }
  HF.jsonLocate = jsonLocate;

  /* "hyperparameters.lr.min", "/searcher/max_trials", "trial.command[0]",
   * "$.searcher" -> ["hyperparameters","lr","min"] ... */
  function splitField(field) {
    return String(field || '').replace(/\[["']?([^\]"']*)["']?\]/g, '.$1').replace(/^\$/, '')
      .split(/[./]/).filter(Boolean);
  }

  /* Where the JSON parser stopped, as a character offset (Chrome's messages
   * say "at position N" or "(line L column C)"). */
  function parseErrorOffset(text, msg) {
    let m = /position (\d+)/.exec(msg);
    if (m) return +m[1];
    m = /line (\d+) column (\d+)/.exec(msg);
    if (m) {
      const lines = text.split('\n');
      let off = 0;
      for (let k = 0; k < +m[1] - 1 && k < lines.length; k++) off += lines[k].length + 1;
      return off + (+m[2] - 1);
    }
    return -1;
  }

  /* The submit editor: gutter with line numbers, textarea, and an inline
   * message box placed under the line of the failing field. */
  function makeEditor() {
    const gutter = h('div.gutter');
    const ta = h('textarea', { spellcheck: 'false', id: 'exp-json', 'aria-label': 'experiment JSON',
      placeholder: 'Paste an experiment file (JSON) here, or upload one.' });
    const inline = h('div.inline-error', { hidden: true });
    const box = h('div.editor', gutter, ta, inline);
    const ed = { box, ta, errLine: -1, errMsg: '' };

    ed.render = function () {
      const lines = ta.value.split('\n').length;
      let html = '';
      for (let k = 1; k <= Math.max(lines, 1); k++) {
        html += (k - 1 === ed.errLine ? '<span class="err">' + k + '</span>' : k) + '\n';
      }
      gutter.innerHTML = html;
      gutter.scrollTop = ta.scrollTop;
      if (ed.errLine >= 0 && ed.errMsg) {
        const top = 8 + (ed.errLine + 1) * 18 - ta.scrollTop;
        inline.style.top = top + 'px';
        inline.textContent = ed.errMsg;
        inline.hidden = top < 0 || top > box.clientHeight - 12;
      } else inline.hidden = true;
    };
    ed.setError = function (line, msg) {
      ed.errLine = line; ed.errMsg = msg || '';
      box.classList.toggle('has-error', line >= 0 || !!msg);
      ed.render();
    };
    ed.lineOf = (off) => ta.value.slice(0, Math.max(0, off)).split('\n').length - 1;
    ed.select = function (start, end) {
      ta.focus();
      ta.setSelectionRange(start, end);
      const line = ed.lineOf(start);
      const want = line * 18 - ta.clientHeight / 3;
      ta.scrollTop = Math.max(0, want);
      ed.render();
    };
    ta.addEventListener('scroll', ed.render);
    ta.addEventListener('input', () => { if (ed.errLine >= 0 || ed.errMsg) ed.setError(-1, ''); else ed.render(); });
    ta.addEventListener('keydown', (ev) => {
      if (ev.key === 'Tab') {
        ev.preventDefault();
        const s = ta.selectionStart;
        ta.setRangeText('  ', s, ta.selectionEnd, 'end');
        ed.render();
      }
    });
    return ed;
  }

  HF.submitPanel = function (onSubmitted) {
    const ed = makeEditor();
    const fileIn = h('input', { type: 'file', accept: '.json,application/json', hidden: true, id: 'exp-file' });
    const ctxIn = h('input', { type: 'file', accept: '.tar.gz,.tgz,application/gzip,application/x-gzip', hidden: true, id: 'context-file' });
    const ctxStatus = h('div.ok-msg#context-status', { hidden: true });
    const msg = h('div.field-error#submit-error', { hidden: true });
    const okMsg = h('div.ok-msg', { hidden: true });
    const submitBtn = h('button.btn.primary#submit-exp', 'Submit');
    const panelTitle = h('h2#submit-title', 'New experiment');
    let forkOf = null;   // experiment id when the editor submits a fork (workflow.js)
    const panel = h('section.panel#submit-panel', { hidden: true },
      h('div.panel-head', panelTitle, h('span.hint', 'Paste or upload an experiment file (docs/design.md §5). Errors point at the field.'),
        h('div.spacer'),
        h('button.btn.small', { onclick: () => fileIn.click() }, 'Upload file…'),
        h('button.btn.small#attach-context', { onclick: () => ctxIn.click(), title: 'a .tar.gz of your code: every trial starts in an unpacked copy of it' }, 'Attach code (.tar.gz)…'),
        h('button.btn.small', { onclick: () => {
          const ex = Object.assign({}, EXAMPLE, ctxStatus.dataset.sha256 ? { context: ctxStatus.dataset.sha256 } : {});
          ed.ta.value = JSON.stringify(ex, null, 2); ed.setError(-1, ''); msg.hidden = true;
        } }, 'Load example'),
        h('button.btn.small', { onclick: () => { panel.hidden = true; setFork(null); } }, 'Close')),
      fileIn, ctxIn, ed.box, ctxStatus, msg, okMsg,
      h('div.row.end', { style: { marginTop: '10px' } }, submitBtn));

    fileIn.addEventListener('change', async () => {
      const f = fileIn.files[0];
      if (!f) return;
      if (f.size > 1 << 20) { showError('file is larger than 1 MiB', null); return; }
      ed.ta.value = await f.text();
      fileIn.value = '';
      ed.setError(-1, ''); msg.hidden = true; okMsg.hidden = true;
      validateLocal();
    });

    /* A code context: uploaded (once), then named in the file's "context". */
    ctxIn.addEventListener('change', async () => {
      const f = ctxIn.files[0];
      ctxIn.value = '';
      if (!f) return;
      msg.hidden = true;
      ctxStatus.hidden = false;
      delete ctxStatus.dataset.sha256;
      ctxStatus.textContent = `hashing and uploading ${f.name}…`;
      try {
        const r = await HF.api.uploadContext(f);
        let obj = null;
        try { obj = JSON.parse(ed.ta.value.trim() || '{}'); } catch (e) { /* left as it is */ }
        const settable = obj && typeof obj === 'object' && !Array.isArray(obj);
        if (settable) { obj.context = r.sha256; ed.ta.value = JSON.stringify(obj, null, 2); ed.setError(-1, ''); }
        const kib = r.size < 1024 ? r.size + ' B' : (r.size / 1024).toFixed(1) + ' KiB';
        ctxStatus.textContent = `code context ${f.name}: ${kib}, sha256 ${r.sha256.slice(0, 12)}…, ` +
          (r.uploaded ? 'uploaded' : 'already on the scheduler') +
          (settable ? '; "context" is set' : `; the file is not valid JSON: add "context": "${r.sha256}"`);
        ctxStatus.dataset.sha256 = r.sha256;
      } catch (e) {
        ctxStatus.hidden = true;
        showError(e.message, 'context');
      }
    });

    function showError(text, field) {
      msg.hidden = false;
      msg.innerHTML = '';
      if (field) msg.append(h('code', field), ': ');
      msg.append(text);
      okMsg.hidden = true;
    }

    /* Client-side syntax check; returns the parsed object or null. */
    function validateLocal() {
      const text = ed.ta.value;
      if (!text.trim()) { showError('paste or upload an experiment file first', null); return null; }
      try { return JSON.parse(text); } catch (e) {
        const off = parseErrorOffset(text, e.message);
        const line = off >= 0 ? ed.lineOf(off) : -1;
        showError('not valid JSON: ' + e.message, line >= 0 ? 'line ' + (line + 1) : null);
        ed.setError(line, 'JSON syntax error here');
        if (off >= 0) ed.select(off, off + 1);
        return null;
      }
    }

    function showFieldError(field, text) {
      const parts = splitField(field);
      const locs = jsonLocate(ed.ta.value);
      let loc = null;
      for (let k = parts.length; k > 0 && !loc; k--) loc = locs.get(parts.slice(0, k).join('.'));
      showError(text, field);
      if (loc) {
        const line = ed.lineOf(loc.start);
        ed.select(loc.start, loc.end);
        ed.setError(line, text);
      } else ed.setError(-1, text);
    }

    submitBtn.addEventListener('click', async () => {
      msg.hidden = true; okMsg.hidden = true; ed.setError(-1, '');
      const obj = validateLocal();
      if (!obj) return;
      if (typeof obj !== 'object' || Array.isArray(obj)) { showFieldError('', 'the experiment file must be a JSON object'); return; }
      submitBtn.disabled = true;
      try {
        const r = await HF.api.req('POST', forkOf ? `/api/v1/experiments/${forkOf}/fork` : '/api/v1/experiments', ed.ta.value);
        okMsg.hidden = false;
        okMsg.innerHTML = '';
        okMsg.append(forkOf ? `Forked #${forkOf} as experiment ` : 'Submitted as experiment ', h('a#submitted-link', { href: '#/experiments/' + r.id }, '#' + r.id), '.');
        if (onSubmitted) onSubmitted(r);
      } catch (e) {
        if (e.status === 400 || e.status === 413 || e.status === 409 || e.status === 422) showFieldError(e.field, e.error || e.message);
        else showError(e.message, null);
      } finally { submitBtn.disabled = false; }
    });

    function setFork(f) {
      forkOf = f ? f.id : null;
      panelTitle.textContent = f ? `Fork experiment #${f.id} ${f.name || ''}` : 'New experiment';
      submitBtn.textContent = f ? 'Submit fork' : 'Submit';
    }
    const fork = HF.takeFork ? HF.takeFork() : null;   // "Fork…" on an experiment page
    if (fork) {
      setFork(fork);
      ed.ta.value = fork.text;
      panel.hidden = false;
      setTimeout(() => ed.render(), 0);
    }
    function toggleNew() {
      setFork(null);
      panel.hidden = !panel.hidden;
      if (!panel.hidden) { ed.render(); ed.ta.focus(); }
    }
    return { el: panel, toggleNew };
  };
})(window.HF);
