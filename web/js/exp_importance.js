/* exp_importance.js — the "Hyperparameter importance" panel: fANOVA
 * importance of each searched hyperparameter over the completed trials
 * (GET /api/v1/experiments/{id}/importance, docs/search.md), as horizontal
 * bars, most important on top (ECharts). Refetched, throttled to 5 s, when
 * the number of COMPLETED trials changed (the scheduler caches the answer
 * until then). With several objectives a chooser (#importance-objective)
 * picks the one ranked (?objective=, default the first); switching
 * refetches and redraws, and the title names it. Test hooks:
 * #importance-chart data-params (names, most important first),
 * data-trials, data-objective (the objective of the drawn answer).
 */
'use strict';
(function (HF) {
  const h = HF.h;

  HF.exp.panels.importance = function (store, host) {
    const el = h('div.chart#importance-chart');
    const hint = h('span.hint', 'fANOVA over a random forest (as Optuna), completed trials only');
    const title = h('h2', 'Hyperparameter importance');
    const objSel = h('select#importance-objective', { 'aria-label': 'objective ranked' });
    const objLabel = h('label#importance-objective-label', { hidden: true }, 'objective', objSel);
    host.append(h('section.panel#importance-panel', h('div.panel-head', title, hint, h('div.spacer'), objLabel), el));
    const EMPTY_H = '56px';
    el.style.height = EMPTY_H;
    const chart = HF.charts.echart(el);
    HF.charts.emptyNote(el, 'loading…');
    let seen = -1, busy = false, chosen = '', asked = '';

    /* The chooser, once the experiment says it has several objectives. */
    function chooser() {
      const objs = HF.objectives(store.exp);
      if (objs.length < 2 || objSel.options.length) return;
      for (const o of objs) objSel.append(h('option', { value: o.metric }, `${o.metric} ${o.goal === 'minimize' ? '↓' : '↑'}`));
      chosen = objSel.value = objs[0].metric;
      objLabel.hidden = false;
    }
    objSel.addEventListener('change', () => {
      chosen = objSel.value;
      seen = -1;   // refetch now, whatever the trials did
      refresh();
      refresh.flush();
    });

    /* "f2 (objective 2 of 3)": the objective the answer r ranks. */
    function objText(r) {
      const objs = HF.objectives(store.exp);
      const m = r.objective || (objs.length ? objs[0].metric : '');
      const k = objs.findIndex((o) => o.metric === m);
      if (!m) return 'the objective';
      return objs.length > 1 ? `${m} (${k <= 0 ? 'the first' : 'objective ' + (k + 1)} of ${objs.length} objectives)` : m;
    }

    function draw(r) {
      const names = r.params || [];
      const objs = HF.objectives(store.exp);
      const m = r.objective || (objs.length ? objs[0].metric : '');
      el.dataset.params = names.join(',');
      el.dataset.trials = String(r.trials);
      el.dataset.objective = hint.dataset.objective = m;
      title.textContent = objs.length > 1 ? `Hyperparameter importance for ${m}` : 'Hyperparameter importance';
      if (!names.length) {   // a one-line message, not a big empty box
        chart.c.clear();
        el.style.height = EMPTY_H;
        chart.c.resize();
        HF.charts.emptyNote(el, r.trials < 2 ? `needs 2 completed trials (${r.trials} so far)` : 'no hyperparameter varies');
        return;
      }
      HF.charts.emptyNote(el, null);
      const rev = names.slice().reverse();   // ECharts draws the first category at the bottom
      hint.textContent = `how much each hyperparameter explains ${objText(r)}: fANOVA over a random forest (as Optuna), ${r.trials} completed trials`;
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
      chooser();
      if (done === seen && chosen === asked) return;
      busy = true;
      const want = chosen;
      try {
        const q = want ? '?objective=' + encodeURIComponent(want) : '';
        const r = await HF.api.get(`/api/v1/experiments/${store.id}/importance${q}`);
        if (store.closed) return;
        seen = done;
        asked = want;
        draw(r);
        if (chosen !== want) refresh();   // switched while this one was in flight
      } catch (e) {
        if (!store.closed) HF.charts.emptyNote(el, 'importance: ' + e.message);
      } finally { busy = false; }
    }, 5000);

    for (const topic of ['all', 'trial']) store.on(topic, refresh);
    return () => { refresh.cancel(); chart.destroy(); };
  };
})(window.HF);
