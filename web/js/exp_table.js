/* exp_table.js — the "Trials" panel: the trial table, sortable (click a
 * header; again to reverse), filterable (free text or terms like
 * `lr<0.01 optimizer=adam state=RUNNING`, and a state select), one column
 * per hyperparameter, one per objective with the Pareto front marked
 * (several objectives); only the brushed trials when the parallel
 * coordinates hold a brush. The row of the hovered curve is highlighted,
 * and hovering a row highlights its curve.
 *
 * The table is virtual: only the rows in view (plus a margin) are in the
 * DOM, between two spacer rows, so 1,000+ trials cost no layout; the rows
 * are written as one HTML string. Column widths come from the longest text
 * of each column over all rows (table-layout: fixed), so they do not jump
 * while scrolling. Redrawn, throttled (0.3 s, 1 s past 300 trials), on
 * `all`, `exp`, `trial`, `latest`, `metric` and `selection`. Test hooks:
 * #trials-table data-rows, th[data-key], tr[data-id].
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const ROW_H = 31, MARGIN = 15;
  const STATES = ['QUEUED', 'ASSIGNED', 'RUNNING', 'COMPLETED', 'STOPPED', 'FAILED', 'CANCELED'];

  /* The columns: {key, label, num, get(trial), fmt?}; best and latest are of
   * the chosen metric. */
  function columns(store) {
    const m = store.metric || store.objMetric();
    // Several objectives: each one's last value (what the front ranks, as
    // GET .../pareto) and the front mark; best/latest of the chosen metric
    // only when it is not one of them.
    const objs = HF.objectives(store.exp);
    const multi = objs.length > 1;
    const objCols = multi ? [
      ...objs.map((o) => ({ key: 'obj:' + o.metric, label: `${o.metric} ${o.goal === 'minimize' ? '↓' : '↑'}`, num: true, get: (t) => (t.latest || {})[o.metric] })),
      { key: 'front', label: 'front', get: (t) => (store.front ? (store.front.has(t.id) ? 'front' : '') : null) },
    ] : [];
    const mine = !multi || !objs.some((o) => o.metric === m);
    return [
      { key: 'id', label: 'ID', num: true, get: (t) => t.id },
      { key: 'state', label: 'State', get: (t) => t.state },
      ...store.hparamKeys().map((k) => ({ key: 'hp:' + k, label: k, num: !(store.specOf(k).values || []).some((v) => typeof v !== 'number'), get: (t) => (t.hparams || {})[k] })),
      ...objCols,
      ...(mine ? [{ key: 'best', label: 'best ' + m, num: true, get: (t) => (t.best || {})[m] },
        { key: 'latest', label: 'latest ' + m, num: true, get: (t) => (t.latest || {})[m] }] : []),
      { key: 'step', label: 'step', num: true, get: (t) => (t.latest || {}).step },
      { key: 'budget', label: 'budget', num: true, get: (t) => t.budget },
      { key: 'restarts', label: 'restarts', num: true, get: (t) => t.restarts },
      { key: 'agent', label: 'agent', get: (t) => t.agent || (t.agent_id != null ? '#' + t.agent_id : null) },
      { key: 'started', label: 'started', get: (t) => t.started_at, fmt: (v) => HF.fmtClock(v).slice(0, 8) },
      { key: 'dur', label: 'duration', num: true, get: (t) => (t.started_at ? (t.ended_at || Date.now()) - t.started_at : null), fmt: HF.fmtDur },
    ];
  }
  const cellText = (c, t) => { const v = c.get(t); return c.fmt ? c.fmt(v) : HF.fmtVal(v); };

  /* Filter terms: "key<v", "key>=v", "key=v", "key!=v" on column keys or
   * labels (hparam names, state, agent...), anything else is a substring.
   * Returns trial -> bool (every term must match). */
  function makeFilter(cols, text) {
    const terms = text.trim().split(/\s+/).filter(Boolean);
    const byName = new Map();
    for (const c of cols) { byName.set(c.label.toLowerCase(), c); byName.set(c.key.replace(/^hp:/, '').toLowerCase(), c); }
    const preds = terms.map((term) => {
      const m = /^([\w.-]+)\s*(<=|>=|!=|=|<|>)\s*(.+)$/.exec(term);
      const col = m && byName.get(m[1].toLowerCase());
      if (col) {
        const raw = m[3], num = Number(raw), isNum = raw !== '' && !isNaN(num);
        return (t) => {
          const v = col.get(t);
          if (v == null) return false;
          const a = typeof v === 'number' && isNum ? v : String(v).toLowerCase();
          const b = typeof v === 'number' && isNum ? num : raw.toLowerCase();
          switch (m[2]) {
            case '<': return a < b; case '>': return a > b; case '<=': return a <= b; case '>=': return a >= b;
            case '!=': return a !== b; default: return a === b;
          }
        };
      }
      const needle = term.toLowerCase();
      return (t) => cols.some((c) => { const v = c.get(t); return v != null && String(v).toLowerCase().includes(needle); });
    });
    return (t) => preds.every((p) => p(t));
  }

  /* HTML of rows[first, last) of the table, between spacer rows standing
   * for the others; bestId's row is marked best, hl's highlighted. */
  function rowsHtml(rows, cols, first, last, bestId, hl, picked) {
    let html = first > 0 ? `<tr class="spacer" style="height:${first * ROW_H}px"></tr>` : '';
    for (let k = first; k < last; k++) {
      const t = rows[k];
      const cls = (t.id === bestId ? 'best ' : '') + (t.id === hl ? 'hl' : '');
      html += `<tr data-id="${t.id}"${cls ? ` class="${cls.trim()}"` : ''}>`;
      html += `<td class="pick"><input type="checkbox" data-pick="${t.id}"${picked.has(t.id) ? ' checked' : ''} title="compare"></td>`;
      for (const c of cols) {
        const v = c.get(t);
        let cell;
        if (c.key === 'id') cell = `<a href="#/trials/${t.id}">${t.id}</a>`;
        else if (c.key === 'state') cell = `<span class="badge ${HF.esc(t.state)}">${HF.esc(t.state)}</span>`;
        else if (c.key === 'front') cell = v ? '<span class="front-mark" title="on the Pareto front (GET /experiments/{id}/pareto)">★ front</span>' : '';
        else if (c.key === 'agent' && t.agent_id != null) cell = `<a href="#/agents">${HF.esc(cellText(c, t))}</a>`;
        else cell = HF.esc(cellText(c, t));
        html += `<td${c.num && typeof v === 'number' ? ' class="num"' : ''}>${cell}</td>`;
      }
      html += '</tr>';
    }
    if (last < rows.length) html += `<tr class="spacer" style="height:${(rows.length - last) * ROW_H}px"></tr>`;
    return html;
  }

  /* Text widths measured on a canvas with the table's own fonts. */
  function textMeter(table) {
    const measure = document.createElement('canvas').getContext('2d');
    const fonts = {};
    return (text, kind) => {
      if (!fonts.td) {
        const fam = getComputedStyle(table).fontFamily;
        fonts.td = `13px ${fam}`; fonts.th = `600 12px ${fam}`; fonts.badge = `600 11px ${fam}`;
      }
      measure.font = fonts[kind];
      return measure.measureText(text).width + (kind === 'badge' ? text.length * 0.3 : 0);
    };
  }

  /* Column widths in px from the measured width of the longest text
   * (sampled for speed); the header leaves room for the sort arrow. */
  function columnWidths(cols, rows, textWidth) {
    const step = Math.max(1, Math.floor(rows.length / 400));
    return cols.map((c) => {
      let w = textWidth(c.label, 'th') + 14;
      for (let k = 0; k < rows.length; k += step) {
        const len = c.key === 'state' ? textWidth(String(rows[k].state).toUpperCase(), 'badge') + 16
          : textWidth(cellText(c, rows[k]), 'td');
        if (len > w) w = len;
      }
      return Math.min(320, Math.ceil(w) + 16 + 4);   // + cell padding + slack
    });
  }

  /* Appends the panel to host; returns the destroy function. */
  HF.exp.panels.table = function (store, host) {
    const filterIn = h('input#trial-filter', { type: 'search', placeholder: 'filter: text, lr<0.01, optimizer=adam, state=RUNNING', style: { width: '340px' } });
    const stateSel = h('select#state-filter', h('option', { value: '' }, 'all states'), ...STATES.map((s) => h('option', { value: s }, s)));
    const head = h('thead');
    const body = h('tbody');
    const table = h('table.data.virtual#trials-table', head, body);
    const note = h('span.hint#table-note');
    // Trials picked for the compare view (page_compare.js), by id.
    const picked = new Set();
    const compareBtn = h('button.btn#compare-btn', { type: 'button', disabled: true, title: 'tick 2 or more trials' }, 'Compare');
    const syncCompare = () => { compareBtn.disabled = picked.size < 2; compareBtn.textContent = picked.size ? `Compare (${picked.size})` : 'Compare'; };
    compareBtn.addEventListener('click', () => { location.hash = '#/compare/' + [...picked].sort((a, b) => a - b).join(','); });
    const wrap = h('div.table-wrap', table);
    host.append(h('section.panel', h('div.panel-head', h('h2', 'Trials'), note, h('div.spacer'), compareBtn, filterIn, stateSel),
      h('div.table-card', wrap)));
    const textWidth = textMeter(table);
    // rows/cols: what the table shows; start/end: the window in the DOM;
    // widths: the key of the header last written; hl: the highlighted row.
    const TV = { rows: [], cols: [], start: -1, end: -1, widths: '', sort: { key: 'id', dir: 1 }, filter: '', state: '', hl: null, rowHover: null };

    function renderWindow(force) {
      const n = TV.rows.length;
      // The box may still be short (rendered while empty): size the window
      // for the height it can grow to, not the height it has now.
      const viewH = Math.max(wrap.clientHeight, parseFloat(getComputedStyle(wrap).maxHeight) || window.innerHeight);
      const first = Math.max(0, Math.floor(wrap.scrollTop / ROW_H) - MARGIN);
      const last = Math.min(n, Math.ceil((wrap.scrollTop + viewH) / ROW_H) + MARGIN);
      if (!force && first === TV.start && last === TV.end) return;
      TV.start = first; TV.end = last;
      const bestId = store.exp && store.exp.best ? store.exp.best.trial_id : null;
      body.innerHTML = rowsHtml(TV.rows, TV.cols, first, last, bestId, TV.hl, picked) ||
        `<tr><td colspan="${TV.cols.length + 1}" class="empty">${store.trials.size ? 'no trial matches' : 'no trials yet'}</td></tr>`;
    }
    /* Columns cut off on the right: fade the edge and say "scroll". */
    const markOverflow = () => wrap.parentElement.classList.toggle('more-right', wrap.scrollLeft + wrap.clientWidth < wrap.scrollWidth - 2);
    const wrapRO = new ResizeObserver(() => { if (TV.cols.length) { renderWindow(false); markOverflow(); } });
    wrapRO.observe(wrap);
    let scrollRaf = 0;
    wrap.addEventListener('scroll', () => {
      cancelAnimationFrame(scrollRaf);
      scrollRaf = requestAnimationFrame(() => { renderWindow(false); markOverflow(); });
    });

    const render = HF.throttle(() => {
      if (store.closed) return;
      const cols = columns(store);
      const col = cols.find((c) => c.key === TV.sort.key) || cols[0];
      const pass = makeFilter(cols, TV.filter);
      const rows = [...store.trials.values()].filter((t) => store.isSel(t.id) && (!TV.state || t.state === TV.state) && pass(t));
      const keyed = rows.map((t) => [col.get(t), t]);
      keyed.sort((a, b) => {
        const d = HF.cmp(a[0], b[0]);
        return d === 0 ? a[1].id - b[1].id : (a[0] == null || a[0] === '' || b[0] == null || b[0] === '' ? d : d * TV.sort.dir);
      });
      TV.rows = keyed.map((x) => x[1]);
      TV.cols = cols;
      const widths = columnWidths(cols, TV.rows, textWidth);
      const wkey = widths.join(',') + '|' + cols.map((c) => c.key).join(',') + '|' + TV.sort.key + TV.sort.dir;
      if (wkey !== TV.widths) {
        TV.widths = wkey;
        table.style.width = widths.reduce((a, b) => a + b, 30) + 'px';
        table.style.minWidth = '100%';
        head.innerHTML = '<tr><th class="pick"></th>' + cols.map((c, i) => `<th class="sortable${c.num ? ' num' : ''}" data-key="${HF.esc(c.key)}" style="width:${widths[i]}px">${HF.esc(c.label)}` +
          (c.key === TV.sort.key ? `<span class="arrow">${TV.sort.dir > 0 ? '▲' : '▼'}</span>` : '') + '</th>').join('') + '</tr>';
      }
      renderWindow(true);
      markOverflow();
      note.textContent = `${TV.rows.length} of ${store.trials.size} trials`;
      table.dataset.rows = String(TV.rows.length);
    }, () => (store.trials.size > 300 ? 1000 : 300));

    head.addEventListener('click', (ev) => {
      const th = ev.target.closest('th[data-key]');
      if (!th) return;
      const k = th.dataset.key;
      TV.sort = TV.sort.key === k ? { key: k, dir: -TV.sort.dir } : { key: k, dir: 1 };
      render(); render.flush();
    });
    body.addEventListener('change', (ev) => {
      const box = ev.target.closest('input[data-pick]');
      if (!box) return;
      if (box.checked) picked.add(+box.dataset.pick); else picked.delete(+box.dataset.pick);
      syncCompare();
    });
    filterIn.addEventListener('input', () => { TV.filter = filterIn.value; render(); });
    stateSel.addEventListener('change', () => { TV.state = stateSel.value; render(); render.flush(); });
    body.addEventListener('mouseover', (ev) => {
      const tr = ev.target.closest('tr[data-id]');
      const tid = tr ? +tr.dataset.id : null;
      if (tid === TV.rowHover) return;
      TV.rowHover = tid;
      if (tid != null && store.curves.has(tid)) store.setCurveHover(tid, 'table');
    });
    body.addEventListener('mouseleave', () => { TV.rowHover = null; store.setCurveHover(null, 'table'); });

    /* The row of the curve hovered on the chart. */
    function highlightRow(tid) {
      if (TV.hl === tid) return;
      const prev = TV.hl != null && body.querySelector(`tr[data-id="${TV.hl}"]`);
      if (prev) prev.classList.remove('hl');
      TV.hl = tid;
      const row = tid != null && body.querySelector(`tr[data-id="${tid}"]`);
      if (row) row.classList.add('hl');
    }

    for (const topic of ['all', 'exp', 'trial', 'latest', 'metric', 'selection', 'front']) store.on(topic, render);
    store.on('hover', (source) => { if (source === 'curves') highlightRow(store.curveHover); });
    return () => { cancelAnimationFrame(scrollRaf); wrapRO.disconnect(); render.cancel(); };
  };
})(window.HF);
