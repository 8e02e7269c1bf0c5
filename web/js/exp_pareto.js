/* exp_pareto.js — the "Pareto front" panel, shown for experiments whose
 * objective is a list of two or more metrics (docs/search.md,
 * "Multi-objective search and constraints").
 *
 * Points are the completed trials' LAST reported values of the objectives
 * (trial.latest, the values the searchers rank and GET
 * /experiments/{id}/pareto uses); the front — which trials are on it — comes
 * from that route, so the page and the API never disagree. Two objectives:
 * one scatter, the front highlighted and joined by a step line in the
 * order of the first objective, infeasible trials (a constraint violated)
 * drawn apart; three or more: one scatter per pair of objectives. Charts
 * zoom (wheel, drag, the toolbox), name the hovered trial, and take log
 * scales (#pareto-log) when every value is positive. Click a
 * dot to open its trial. Test hooks on #pareto-panel: data-front (front
 * size) and data-pairs (number of pair charts). Refetched, throttled to
 * 3 s, on `all`, `trial` and `latest`.
 */
'use strict';
(function (HF) {
  const h = HF.h;

  const objectivesOf = (e) => {
    const o = e && e.config && e.config.objective;
    return Array.isArray(o) ? o : [];
  };

  /* Is t within every constraint (last values; a missing metric is not)? */
  function feasible(cons, t) {
    const l = t.latest || {};
    return cons.every((c) => typeof l[c.metric] === 'number' &&
      (c.min == null || l[c.metric] >= c.min) && (c.max == null || l[c.metric] <= c.max));
  }

  /* The scatter of objectives a (x) and b (y): front, others, infeasible;
   * each point [x, y, trial id]. */
  function pairOption(oa, ob, front, other, infeasible, line, log) {
    const tip = (p) => `trial ${p.value[2]}<br>${HF.esc(oa.metric)} = ${HF.fmtNum(p.value[0])}<br>${HF.esc(ob.metric)} = ${HF.fmtNum(p.value[1])}`;
    const axis = (o, y) => ({ type: log ? 'log' : 'value', scale: true, name: `${o.metric} (${o.goal === 'maximize' ? 'max' : 'min'})`,
      nameLocation: y ? 'end' : 'middle', nameGap: y ? 10 : 28, nameTextStyle: y ? { align: 'left' } : {},
      axisLabel: { hideOverlap: true }, splitLine: { lineStyle: { color: '#eef0f4' } } });
    // Hovering a point names its trial beside it (and in the tooltip).
    const hoverLabel = { label: { show: true, position: 'top', formatter: (p) => '#' + p.value[2], fontSize: 11, color: '#1d2330' } };
    return {
      animation: false,
      grid: { left: 12, right: 24, top: 34, bottom: 42, containLabel: true },
      // Zoom: the mouse wheel and a drag on either axis; the toolbox box-zooms and resets.
      dataZoom: [{ type: 'inside', xAxisIndex: 0, filterMode: 'none' }, { type: 'inside', yAxisIndex: 0, filterMode: 'none' }],
      toolbox: { right: 250, top: -4, itemSize: 13, feature: { dataZoom: { filterMode: 'none', title: { zoom: 'box zoom', back: 'undo zoom' } }, restore: { title: 'reset' } } },
      legend: { top: 0, right: 0, itemWidth: 10, itemHeight: 10, textStyle: { fontSize: 11 }, data: ['Pareto front', 'dominated', 'infeasible'] },
      tooltip: { trigger: 'item', formatter: tip },
      xAxis: axis(oa, false),
      yAxis: axis(ob, true),
      series: [
        { type: 'scatter', name: 'infeasible', data: infeasible, symbol: 'triangle', symbolSize: 6, itemStyle: { color: '#e8a33d', opacity: 0.7 }, emphasis: hoverLabel },
        { type: 'scatter', name: 'dominated', data: other, symbolSize: 5, itemStyle: { color: '#c9ced8' }, emphasis: hoverLabel },
        // The attainment staircase: between two front points the boundary is
        // held by the one better in x (the left one when x is minimised).
        { type: 'line', name: 'front', data: line, step: oa.goal === 'maximize' ? 'start' : 'end', showSymbol: false, silent: true,
          lineStyle: { color: '#d6453d', width: 1.5 }, z: 2 },
        { type: 'scatter', name: 'Pareto front', data: front, symbolSize: 9, itemStyle: { color: '#d6453d', borderColor: '#fff', borderWidth: 1 }, z: 3, emphasis: hoverLabel },
      ],
    };
  }

  /* Appends the (hidden until known to be multi-objective) panel to host;
   * returns the destroy function. */
  HF.exp.panels.pareto = function (store, host) {
    const grid = h('div.grid-charts#pareto-grid');
    const hint = h('span.hint');
    const logChk = h('input#pareto-log', { type: 'checkbox' });
    const logLabel = h('label', { title: 'log scales (when every value drawn is positive)' }, logChk, 'log scales');
    const panel = h('section.panel#pareto-panel', { hidden: true },
      h('div.panel-head', h('h2', 'Pareto front'), hint, h('div.spacer'), h('span.hint', 'wheel or drag to zoom'), logLabel), grid);
    host.append(panel);
    let charts = [];     // [{key, chart, el}], one per pair of objectives
    let frontIds = new Set();

    function rebuild(objs) {
      charts.forEach((c) => c.chart.destroy());
      grid.replaceChildren();
      charts = [];
      for (let a = 0; a < objs.length; a++) {
        for (let b = a + 1; b < objs.length; b++) {
          const el = h('div.chart' + (objs.length > 2 ? '.small' : '.tall'));
          const key = `${objs[a].metric}|${objs[b].metric}`;
          grid.append(h('div.chart-box', { 'data-pair': key }, h('h3', `${objs[b].metric} vs ${objs[a].metric}`), el));
          const chart = HF.charts.echart(el);
          chart.c.on('click', (p) => { if (p.value && p.value[2] != null) location.hash = '#/trials/' + p.value[2]; });
          charts.push({ key, a, b, chart, el });
        }
      }
      panel.dataset.pairs = String(charts.length);
      // One pair: a single chart the width of the panel.
      grid.style.gridTemplateColumns = charts.length === 1 ? 'minmax(0, 1fr)' : '';
    }

    function draw(objs, cons) {
      const done = [...store.trials.values()].filter((t) => t.state === 'COMPLETED' &&
        objs.every((o) => typeof (t.latest || {})[o.metric] === 'number'));
      for (const c of charts) {
        const ma = objs[c.a].metric, mb = objs[c.b].metric;
        const front = [], other = [], infeasible = [];
        for (const t of done) {
          const p = [t.latest[ma], t.latest[mb], t.id];
          if (frontIds.has(t.id)) front.push(p);
          else if (!feasible(cons, t)) infeasible.push(p);
          else other.push(p);
        }
        // The staircase through the front in this projection (2 objectives:
        // exactly the attainment boundary).
        const line = objs.length === 2 ? front.slice().sort((x, y) => x[0] - y[0]).map((p) => [p[0], p[1]]) : [];
        // Log scales only where every value drawn is positive.
        const positive = done.every((t) => t.latest[ma] > 0 && t.latest[mb] > 0);
        const log = logChk.checked && positive;
        c.el.dataset.log = log ? '1' : '';
        c.chart.c.setOption(pairOption(objs[c.a], objs[c.b], front, other, infeasible, line, log), { replaceMerge: ['series', 'xAxis', 'yAxis'] });
        HF.charts.emptyNote(c.el, done.length ? null : 'no completed trial has reported every objective yet');
      }
    }

    const refresh = HF.throttle(async () => {
      const e = store.exp;
      const objs = objectivesOf(e);
      panel.hidden = objs.length < 2;
      if (panel.hidden || store.closed) return;
      const keys = [];
      for (let a = 0; a < objs.length; a++) for (let b = a + 1; b < objs.length; b++) keys.push(`${objs[a].metric}|${objs[b].metric}`);
      if (charts.length !== keys.length || charts.some((c, i) => c.key !== keys[i])) rebuild(objs);
      let cons = (e.config && e.config.constraints) || [];
      try {
        const p = await HF.api.get(`/api/v1/experiments/${e.id}/pareto`);
        if (store.closed) return;
        frontIds = new Set((p.trials || []).map((t) => t.trial_id));
        store.front = frontIds;   // the trial table marks them (exp_table.js)
        store.emit('front');
        cons = p.constraints || cons;
        hint.textContent = `${frontIds.size} trial${frontIds.size === 1 ? '' : 's'} on the front, of ${p.feasible} feasible and ${p.completed} completed` +
          (cons.length ? ` (constraints: ${cons.map((c) => `${c.min != null ? HF.fmtNum(c.min) + ' ≤ ' : ''}${c.metric}${c.max != null ? ' ≤ ' + HF.fmtNum(c.max) : ''}`).join(', ')})` : '');
      } catch (err) {
        hint.textContent = 'front unavailable: ' + err.message;
      }
      panel.dataset.front = String(frontIds.size);
      S.objs = objs; S.cons = cons;
      draw(objs, cons);
    }, 3000);
    const S = { objs: null, cons: [] };
    logChk.addEventListener('change', () => { if (S.objs) draw(S.objs, S.cons); });

    for (const topic of ['all', 'trial', 'latest']) store.on(topic, refresh);
    return () => { refresh.cancel(); charts.forEach((c) => c.chart.destroy()); };
  };
})(window.HF);
