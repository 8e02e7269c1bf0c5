/* exp_importance.js — the "Hyperparameter importance" panel: fANOVA
 * importance of each searched hyperparameter over the completed trials
 * (GET /api/v1/experiments/{id}/importance, docs/search.md), as horizontal
 * bars, most important on top (ECharts). Refetched, throttled to 5 s, when
 * the number of COMPLETED trials changed (the scheduler caches the answer
 * until then). Test hooks: #importance-chart data-params (names, most
 * important first), data-trials.
 */
'use strict';
(function (HF) {
  const h = HF.h;

  HF.exp.panels.importance = function (store, host) {
    const el = h('div.chart#importance-chart');
    const hint = h('span.hint', 'fANOVA over a random forest (as Optuna), completed trials only');
    host.append(h('section.panel#importance-panel', h('div.panel-head', h('h2', 'Hyperparameter importance'), hint), el));
    const chart = HF.charts.echart(el);
    let seen = -1, busy = false;

    function draw(r) {
      const names = r.params || [];
      el.dataset.params = names.join(',');
      el.dataset.trials = String(r.trials);
      if (!names.length) {
        chart.c.clear();
        HF.charts.emptyNote(el, r.trials < 2 ? `needs 2 completed trials (${r.trials} so far)` : 'no hyperparameter varies');
        return;
      }
      HF.charts.emptyNote(el, null);
      const rev = names.slice().reverse();   // ECharts draws the first category at the bottom
      hint.textContent = `fANOVA over a random forest (as Optuna), ${r.trials} completed trials`;
      chart.c.setOption({
        animation: false,
        grid: { left: 8, right: 56, top: 8, bottom: 24, containLabel: true },
        tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, valueFormatter: (v) => HF.fmtNum(v, 3) },
        xAxis: { type: 'value', min: 0, max: (v) => Math.min(1, Math.ceil(v.max * 10 + 0.5) / 10), axisLabel: { formatter: (v) => HF.fmtNum(v, 2) }, splitLine: { lineStyle: { color: '#eef0f4' } } },
        yAxis: { type: 'category', data: rev, axisTick: { show: false }, axisLabel: { width: 140, overflow: 'truncate' } },
        series: [{ type: 'bar', data: rev.map((n) => r.importance[n]), barMaxWidth: 22, itemStyle: { color: '#2f6fed', borderRadius: [0, 3, 3, 0] },
          label: { show: true, position: 'right', formatter: (p) => HF.fmtNum(p.value, 3) } }],
      }, true);
      el.style.height = Math.max(120, 40 + names.length * 30) + 'px';
      chart.c.resize();
    }

    const refresh = HF.throttle(async () => {
      if (store.closed || busy) return;
      let done = 0;
      for (const t of store.trials.values()) if (t.state === 'COMPLETED') done++;
      if (done === seen) return;
      busy = true;
      try {
        const r = await HF.api.get(`/api/v1/experiments/${store.id}/importance`);
        if (store.closed) return;
        seen = done;
        draw(r);
      } catch (e) {
        if (!store.closed) HF.charts.emptyNote(el, 'importance: ' + e.message);
      } finally { busy = false; }
    }, 5000);

    for (const topic of ['all', 'trial']) store.on(topic, refresh);
    return () => { refresh.cancel(); chart.destroy(); };
  };
})(window.HF);
