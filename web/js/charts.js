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
    el.__uplot = u;   // for tests/web/layout.test.js, which measures its axes
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

  /* Axis value formatter for uPlot numeric axes: as many decimals as the
   * tick increment uPlot chose needs (so neighbouring ticks never read the
   * same), exponent notation for very small or large magnitudes. */
  charts.fmtTicks = (u, vals, axisIdx, space, incr) => {
    const fin = vals.filter((v) => v != null && isFinite(v));
    const mag = Math.max(0, ...fin.map(Math.abs));
    const step = incr > 0 ? incr : (fin.length > 1 ? Math.abs(fin[1] - fin[0]) : 0);
    if (mag && (mag >= 1e6 || mag < 1e-3)) {
      const digits = step > 0 ? Math.min(6, Math.max(0, Math.ceil(Math.log10(mag / step) - 1e-9))) : 2;
      return vals.map((v) => (v == null ? '' : (v === 0 ? '0' : v.toExponential(digits))));
    }
    const dec = step > 0 ? Math.min(10, Math.max(0, -Math.floor(Math.log10(step) + 1e-9))) : 3;
    return vals.map((v) => (v == null ? '' : v.toFixed(dec)));
  };

  /* uPlot axis size from the widest label drawn (uPlot's documented
   * auto-size hook), so a y axis never clips its labels. */
  charts.axisSize = (u, values, axisIdx, cycleNum) => {
    const ax = u.axes[axisIdx];
    if (cycleNum > 1 && ax._size) return ax._size;
    let w = 0;
    if (values && values.length) {
      u.ctx.save();
      u.ctx.font = Array.isArray(ax.font) ? ax.font[0] : ax.font;
      for (const v of values) if (v != null) w = Math.max(w, u.ctx.measureText(String(v)).width / (window.devicePixelRatio || 1));
      u.ctx.restore();
    }
    return Math.ceil(w + (ax.ticks && ax.ticks.show !== false ? ax.ticks.size : 0) + ax.gap + (ax.label ? ax.labelSize : 0) + 4);
  };

  /* A time x axis whose labels keep apart ("7:12am7:13am" never): 90 px
   * between ticks and uPlot's format table with a 24-hour clock and short
   * second lines (month/day, hour:minute), so the first label is not cut
   * at the chart's left edge. Rows: [tick increment s, label, then the
   * second line when the year / month / day / hour / minute changes, mode]. */
  const TIME_VALUES = [
    [3600 * 24 * 365, '{YYYY}', null, null, null, null, null, null, 1],
    [3600 * 24 * 28, '{MMM}', '\n{YYYY}', null, null, null, null, null, 1],
    [3600 * 24, '{M}/{D}', '\n{YYYY}', null, null, null, null, null, 1],
    [3600, '{HH}:{mm}', '\n{M}/{D}', null, '\n{M}/{D}', null, null, null, 1],
    [60, '{HH}:{mm}', '\n{M}/{D}', null, '\n{M}/{D}', null, null, null, 1],
    [1, ':{ss}', '\n{M}/{D} {HH}:{mm}', null, '\n{M}/{D} {HH}:{mm}', null, '\n{HH}:{mm}', null, 1],
    [0.001, ':{ss}.{fff}', '\n{M}/{D} {HH}:{mm}', null, '\n{M}/{D} {HH}:{mm}', null, '\n{HH}:{mm}', null, 1],
  ];
  charts.timeAxis = () => ({ space: 90, values: TIME_VALUES, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } });

  /* Common uPlot options for a single metric against step. */
  charts.metricOpts = function (name, color, xLabel) {
    return {
      title: '',
      legend: { show: true, live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      scales: { x: { time: false }, y: { auto: true } },
      axes: [
        { label: xLabel || 'step', labelSize: 16, size: 32, values: charts.fmtTicks, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } },
        { values: charts.fmtTicks, size: charts.axisSize, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } },
      ],
      series: [
        { label: xLabel || 'step', value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) },
        { label: name, stroke: color || '#2f6fed', width: 1.5, points: { show: false },
          value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) },
      ],
    };
  };
})(window.HF);
