/* charts.js — thin wrappers around the two vendored charting libraries.
 *
 * uPlot draws time series (a trial's metrics, the best-so-far curve): tens of
 * thousands of points redraw in a few milliseconds. Apache ECharts draws the
 * many-trial learning curves (one series per trial, hover emphasis), the
 * parallel coordinates with axis brushing and the scatter plots.
 * Both wrappers follow the element's size (ResizeObserver) and are torn down
 * with destroy() when a page unmounts.
 */
'use strict';
(function (HF) {
  const charts = HF.charts = {};

  /* A uPlot chart filling `el` (which has a CSS height). */
  charts.uplot = function (el, opts, data) {
    const legendH = opts.legend && opts.legend.show === false ? 0 : 30;
    const size = () => ({ width: Math.max(160, el.clientWidth), height: Math.max(100, el.clientHeight - legendH) });
    const u = new uPlot(Object.assign({}, opts, size()), data, el);
    let raf = 0;
    const ro = new ResizeObserver(() => {
      cancelAnimationFrame(raf);
      raf = requestAnimationFrame(() => {
        const s = size();
        if (s.width !== u.width || s.height !== u.height) u.setSize(s);
      });
    });
    ro.observe(el);
    return {
      u,
      setData(d, resetScales) { u.setData(d, resetScales !== false); },
      destroy() { ro.disconnect(); cancelAnimationFrame(raf); u.destroy(); },
    };
  };

  /* An ECharts instance filling `el`. */
  charts.echart = function (el) {
    const c = echarts.init(el, null, { renderer: 'canvas' });
    let raf = 0;
    const ro = new ResizeObserver(() => {
      cancelAnimationFrame(raf);
      raf = requestAnimationFrame(() => { if (!c.isDisposed()) c.resize(); });
    });
    ro.observe(el);
    return { c, destroy() { ro.disconnect(); cancelAnimationFrame(raf); c.dispose(); } };
  };

  /* A placeholder message over an empty chart. */
  charts.emptyNote = function (el, text) {
    let n = el.querySelector(':scope > .chart-empty');
    if (!text) { if (n) n.remove(); return; }
    if (!n) { n = HF.h('div.chart-empty'); el.appendChild(n); }
    n.textContent = text;
  };

  /* Axis value formatter for uPlot numeric axes. */
  charts.fmtTicks = (u, vals) => vals.map((v) => (v == null ? '' : HF.fmtNum(v, 3)));

  /* Common uPlot options for a single metric against step. */
  charts.metricOpts = function (name, color, xLabel) {
    return {
      title: '',
      legend: { show: true, live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      scales: { x: { time: false }, y: { auto: true } },
      axes: [
        { label: xLabel || 'step', labelSize: 16, size: 32, values: charts.fmtTicks, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } },
        { values: charts.fmtTicks, size: 56, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } },
      ],
      series: [
        { label: xLabel || 'step', value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) },
        { label: name, stroke: color || '#2f6fed', width: 1.5, points: { show: false },
          value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) },
      ],
    };
  };
})(window.HF);
