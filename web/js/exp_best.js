/* exp_best.js — the "Best so far" panel: each trial's objective as a dot at
 * the time it ended (now while it runs) and the running best as a step line
 * (uPlot). Redrawn, throttled to 1.5 s, on `all`, `trial` and `objective`.
 */
'use strict';
(function (HF) {
  const h = HF.h;

  /* Appends the panel to host; returns the destroy function. */
  HF.exp.panels.best = function (store, host) {
    const el = h('div.chart.tall#best-chart');
    host.append(h('section.panel', h('div.panel-head', h('h2', 'Best so far'),
      h('span.hint', 'objective of each trial (dots) and the running best (line) over time')), el));
    const value = (u, v) => (v == null ? '–' : HF.fmtNum(v));
    const chart = HF.charts.uplot(el, {
      legend: { show: true },
      cursor: { points: { size: 6 } },
      scales: { x: { time: true }, y: { auto: true } },
      axes: [HF.charts.timeAxis(),
        { values: HF.charts.fmtTicks, size: HF.charts.axisSize, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } }],
      series: [{ label: 'time' },
        { label: 'trial objective', stroke: '#9aa3b5', width: 0, paths: () => null, points: { show: true, size: 5, fill: '#9aa3b5' }, value },
        { label: 'best so far', stroke: '#1f9d55', width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false }, value }],
    }, [[], [], []]);

    const render = HF.throttle(() => {
      if (store.closed) return;
      const pts = [];
      const now = Date.now();
      for (const t of store.trials.values()) {
        if (t.objective == null || typeof t.objective !== 'number') continue;
        const when = HF.TERMINAL.has(t.state) ? (t.ended_at || now) : now;
        pts.push([when / 1000, t.objective]);
      }
      pts.sort((a, b) => a[0] - b[0]);
      const xs = [], ys = [], bs = [];
      let best = null;
      for (const [x, y] of pts) { if (store.better(y, best)) best = y; xs.push(x); ys.push(y); bs.push(best); }
      if (xs.length) {
        // The running best extends to now; a very short span gets a margin
        // (uPlot would widen a zero-width time range to days).
        const end = Math.max(xs[xs.length - 1], (store.exp && store.exp.ended_at ? store.exp.ended_at : now) / 1000);
        if (end > xs[xs.length - 1]) { xs.push(end); ys.push(null); bs.push(best); }
        if (xs[xs.length - 1] - xs[0] < 10) {
          const pad = (10 - (xs[xs.length - 1] - xs[0])) / 2;
          xs.unshift(xs[0] - pad); ys.unshift(null); bs.unshift(null);
          xs.push(xs[xs.length - 1] + pad); ys.push(null); bs.push(null);
        }
      }
      chart.setData([xs, ys, bs]);
      HF.charts.emptyNote(el, xs.length ? null : 'no trial has reported the objective yet');
    }, 1500);

    for (const topic of ['all', 'trial', 'objective']) store.on(topic, render);
    return () => { render.cancel(); chart.destroy(); };
  };
})(window.HF);
