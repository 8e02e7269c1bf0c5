/* page_compare.js — #/compare/{id},{id},…: trials side by side (issue 17):
 * a table of state, objective and every hyperparameter with the rows
 * where the trials differ highlighted; their learning curves of one
 * metric overlaid on one uPlot chart (one colour per trial, the same in
 * the table header); the final metrics (best and latest of every metric)
 * with differences highlighted too. Reached from the trial table's
 * checkboxes (exp_table.js). Data: GET /trials/{id} and
 * /trials/{id}/metrics?name=&max_points= (server-side LTTB).
 * Test hooks: #compare-table data-diff (the differing rows' labels),
 * #compare-metrics, #compare-curves data-series data-metric, root data-loaded.
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const COLORS = ['#2f6fed', '#d64545', '#1f9d55', '#d98b00', '#8e6bd8', '#0aa2b5', '#c2418f', '#6b7385'];
  const MAX_POINTS = 2000;

  const same = (a, b) => JSON.stringify(a === undefined ? null : a) === JSON.stringify(b === undefined ? null : b);

  /* A table: a header row of trials, then one row per [label, get(trial)];
   * rows whose values differ get class diff. Returns [table, diffLabels]. */
  function sideBySide(id, trials, rows) {
    const diffs = [];
    const head = h('tr', h('th.rowhead', ''), ...trials.map((t, i) => h('th', h('span.compare-swatch', { style: { background: COLORS[i % COLORS.length] } }),
      h('a', { href: `#/trials/${t.id}` }, `trial ${t.id}`))));
    const body = rows.map(([label, get]) => {
      const vals = trials.map(get);
      const differ = vals.some((v) => !same(v, vals[0]));
      if (differ) diffs.push(label);
      return h('tr' + (differ ? '.diff' : ''), h('th.rowhead', label),
        ...vals.map((v) => h('td' + (differ ? '.diff' : '') + (typeof v === 'number' ? '.num' : ''),
          v == null ? '–' : (typeof v === 'object' ? JSON.stringify(v) : HF.fmtVal(v)))));
    });
    const table = h('table.data.compare#' + id, h('thead', head), h('tbody', ...body));
    table.dataset.diff = diffs.join(',');
    return table;
  }

  HF.pages = HF.pages || {};
  HF.pages.compare = function (root, params) {
    const ids = [...new Set(params.ids)].slice(0, 12);
    const S = { closed: false, chart: null, trials: [], metric: null };
    const metricSel = h('select#compare-metric');
    const curvesEl = h('div.chart.tall#compare-curves');
    // The tables grow with their rows: no inner scrolling box that cuts them off.
    const hpHost = h('div.table-wrap', { style: { maxHeight: 'none' } }), mHost = h('div.table-wrap', { style: { maxHeight: 'none' } });
    root.append(
      h('div.crumbs', h('a', { href: '#/experiments' }, 'Experiments'), ' / compare'),
      h('div.page-head', h('h1', `Compare ${ids.length} trials`), h('span.sub', 'rows where the trials differ are highlighted')),
      h('section.panel', h('div.panel-head', h('h2', 'Hyperparameters'), h('span.hint', 'state, objective, every hyperparameter')), hpHost),
      h('section.panel', h('div.panel-head', h('h2', 'Learning curves'), h('div.spacer'), h('label', 'metric', metricSel)), curvesEl),
      h('section.panel', h('div.panel-head', h('h2', 'Final metrics'), h('span.hint', 'best and latest value of every metric')), mHost));

    async function drawCurves() {
      const m = S.metric;
      const res = await Promise.all(S.trials.map((t) =>
        HF.api.get(`/api/v1/trials/${t.id}/metrics?name=${encodeURIComponent(m)}&max_points=${MAX_POINTS}`).catch(() => ({ metrics: [] }))));
      if (S.closed || m !== S.metric) return;
      const xsSet = new Set();
      const maps = res.map((r) => {
        const mp = new Map();
        for (const p of r.metrics || []) {
          const x = p.step != null ? p.step : (p.epoch != null ? p.epoch : p.seq);
          mp.set(x, p.value);
          xsSet.add(x);
        }
        return mp;
      });
      const xs = [...xsSet].sort((a, b) => a - b);
      const data = [xs, ...maps.map((mp) => xs.map((x) => (mp.has(x) ? mp.get(x) : null)))];
      if (S.chart) S.chart.destroy();
      const opts = HF.charts.metricOpts(m, COLORS[0], 'step');
      opts.series = [opts.series[0], ...S.trials.map((t, i) => ({ label: `trial ${t.id}`, stroke: COLORS[i % COLORS.length], width: 1.5,
        spanGaps: true, points: { show: xs.length < 60 }, value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) }))];
      S.chart = HF.charts.uplot(curvesEl, opts, data);
      curvesEl.dataset.series = String(maps.filter((mp) => mp.size).length);
      curvesEl.dataset.metric = m;
      HF.charts.emptyNote(curvesEl, xs.length ? null : `no trial reported ${m}`);
    }

    async function load() {
      try {
        S.trials = await Promise.all(ids.map((id) => HF.api.get(`/api/v1/trials/${id}`)));
      } catch (e) {
        root.append(h('div.empty', e.status === 404 ? 'One of these trials does not exist.' : 'loading failed: ' + e.message));
        return;
      }
      if (S.closed) return;
      const T = S.trials;
      const exp = await HF.api.get(`/api/v1/experiments/${T[0].experiment_id}`).catch(() => null);
      const objMetric = exp && exp.objective && exp.objective.metric;
      const keys = (k) => [...new Set(T.flatMap((t) => Object.keys(t[k] || {})))];
      const hpRows = [
        ['experiment', (t) => t.experiment_id], ['state', (t) => t.state],
        ['objective' + (objMetric ? ` (${objMetric})` : ''), (t) => t.objective],
        ['restarts', (t) => t.restarts], ['budget', (t) => t.budget],
        ['duration', (t) => (t.started_at ? HF.fmtDur((t.ended_at || Date.now()) - t.started_at) : null)],
        ...keys('hparams').map((k) => [k, (t) => (t.hparams || {})[k]]),
      ];
      hpHost.replaceChildren(sideBySide('compare-table', T, hpRows));
      const metrics = keys('best').filter((k) => k !== 'step' && k !== 'epoch');
      const mRows = [];
      // "best" follows each metric's direction (the trial's goals: docs/guide.md "The objective").
      const dir = (k) => { const g = T.map((t) => (t.goals || {})[k]).find(Boolean); return g === 'minimize' ? ' (min)' : g === 'maximize' ? ' (max)' : ''; };
      for (const k of metrics) mRows.push(['best ' + k + dir(k), (t) => (t.best || {})[k]], ['latest ' + k, (t) => (t.latest || {})[k]]);
      mRows.push(['step', (t) => (t.latest || {}).step]);
      mHost.replaceChildren(sideBySide('compare-metrics', T, mRows));
      const names = keys('latest').filter((k) => k !== 'step' && k !== 'epoch');
      S.metric = names.includes(objMetric) ? objMetric : names[0];
      metricSel.replaceChildren(...names.map((n) => h('option', { value: n, selected: n === S.metric }, n)));
      if (S.metric) await drawCurves();
      else HF.charts.emptyNote(curvesEl, 'no metric reported yet');
      root.dataset.loaded = '1';
    }
    metricSel.addEventListener('change', () => { S.metric = metricSel.value; drawCurves(); });
    load();
    return () => { S.closed = true; if (S.chart) S.chart.destroy(); };
  };
})(window.HF);
