/* exp_scatter.js — the "Objective vs each hyperparameter" panel: one small
 * ECharts scatter per searched hyperparameter (log axes for `log`
 * parameters, category axes for categorical ones); brushed-out trials grey,
 * click a dot to open its trial. The charts are re-created only when the
 * set of hyperparameters changes. Redrawn, throttled to 2.5 s, on `all`,
 * `trial`, `objective` and `selection`.
 */
'use strict';
(function (HF) {
  const h = HF.h;

  /* The option of the scatter for axis d (of store.dims()); on / off: the
   * selected and brushed-out points, [value, objective, trial id]. */
  function scatterOption(d, objName, on, off) {
    return {
      animation: false,
      grid: { left: 52, right: 14, top: 10, bottom: 34 },
      tooltip: { trigger: 'item', formatter: (p) => `trial ${p.value[2]}<br>${HF.esc(d.key)} = ${HF.fmtVal(p.value[0])}<br>${HF.esc(objName)} = ${HF.fmtNum(p.value[1])}` },
      xAxis: d.type === 'category' ? { type: 'category', data: d.cats, name: d.key, nameLocation: 'middle', nameGap: 22,
        axisLabel: { interval: 0, hideOverlap: true, formatter: HF.exp.catLabel } }
        : { type: d.type, scale: true, name: d.key, nameLocation: 'middle', nameGap: 22, axisLabel: { hideOverlap: true }, splitLine: { lineStyle: { color: '#eef0f4' } } },
      yAxis: { type: 'value', scale: true, axisLabel: { hideOverlap: true }, splitLine: { lineStyle: { color: '#eef0f4' } } },
      series: [
        { type: 'scatter', name: 'other', data: off, symbolSize: 5, itemStyle: { color: '#c9ced8' }, large: off.length > 2000 },
        { type: 'scatter', name: 'trials', data: on, symbolSize: 7, itemStyle: { color: '#2f6fed', opacity: 0.8 }, large: on.length > 2000 },
      ],
    };
  }

  /* Appends the panel to host; returns the destroy function. */
  HF.exp.panels.scatter = function (store, host) {
    const grid = h('div.grid-charts#scatter-grid');
    host.append(h('section.panel', h('div.panel-head', h('h2', 'Objective vs each hyperparameter')), grid));
    let scatters = [];   // [{key, chart, el}], one per hyperparameter axis

    function rebuild(hp) {
      scatters.forEach((s) => s.chart.destroy());
      grid.replaceChildren();
      scatters = hp.map((d) => {
        const el = h('div.chart.small');
        grid.append(h('div.chart-box', { 'data-hparam': d.key }, h('h3', `${store.objMetric()} vs ${d.key}`), el));
        const chart = HF.charts.echart(el);
        chart.c.on('click', (p) => { if (p.value && p.value[2] != null) location.hash = '#/trials/' + p.value[2]; });
        return { key: d.key, chart, el };
      });
      if (!hp.length) grid.append(h('div.empty', 'no searched hyperparameters yet'));
    }

    const render = HF.throttle(() => {
      if (store.closed) return;
      const { dims, trials } = store.dims();
      const hp = dims.filter((d) => !d.objective);
      if (scatters.length !== hp.length || scatters.some((s, i) => s.key !== hp[i].key)) rebuild(hp);
      hp.forEach((d, i) => {
        const on = [], off = [];
        for (const t of trials) (store.isSel(t.id) ? on : off).push([HF.exp.dimVal(d, t), t.objective, t.id]);
        scatters[i].chart.c.setOption(scatterOption(d, store.objMetric(), on, off), { replaceMerge: ['series'] });
        HF.charts.emptyNote(scatters[i].el, trials.length ? null : 'no objective yet');
      });
    }, 2500);

    for (const topic of ['all', 'trial', 'objective', 'selection']) store.on(topic, render);
    return () => { render.cancel(); scatters.forEach((s) => s.chart.destroy()); };
  };
})(window.HF);
