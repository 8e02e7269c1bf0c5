/* exp_parallel.js — the "Hyperparameters vs objective" panel: parallel
 * coordinates of the searched hyperparameters and the objective (ECharts),
 * lines coloured by objective. Dragging along an axis brushes: the brushed
 * trials become the store's selection, which the table, curves and scatter
 * follow; "Clear brush" re-creates the chart, dropping every interval.
 *
 * Redrawn, throttled to 2 s, on `all`, `trial` and `objective`. The chart is
 * set again only when its lines changed: re-rendering the axes can
 * interrupt a brush drag. Test hooks: #parallel-chart data-lines,
 * #selection-note, #clear-selection, #parallel-tip.
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const dimVal = HF.exp.dimVal;

  /* The whole chart for axes dims, with visualMap and series: the axes'
   * style, category labels as chips (truncated by HF.exp.catLabel; the full
   * value shows on hover, see the mouseover handler). */
  function chartOption(dims, visualMap, series) {
    return {
      animation: false,
      parallel: { left: 70, right: 90, top: 36, bottom: 28, parallelAxisDefault: {
        nameLocation: 'end', nameGap: 14, nameTextStyle: { fontSize: 12, color: '#3b4352', fontWeight: 600 },
        // Labels sit on a white plate above the lines (axes at z 3,
        // series at 2) so crossing lines do not run through them.
        axisLabel: { fontSize: 11, color: '#3b4352', formatter: (v) => (typeof v === 'number' ? HF.fmtNum(v, 3) : v),
          backgroundColor: 'rgba(255,255,255,.88)', padding: [1, 3], borderRadius: 3 },
        areaSelectStyle: { width: 18, borderColor: '#2f6fed', color: 'rgba(47,111,237,.18)' } } },
      parallelAxis: dims.map((d, i) => ({ dim: i, name: d.key + (d.objective ? ' ★' : ''), type: d.type,
        data: d.cats, scale: d.type === 'value', z: 3, triggerEvent: d.type === 'category',
        axisLabel: d.type === 'category' ? { formatter: HF.exp.catLabel,
          fontWeight: 600, lineHeight: 15, backgroundColor: '#fff', borderColor: '#c9d1df', borderWidth: 1, padding: [1, 5], margin: 8 } : {} })),
      visualMap, series,
      tooltip: { show: false },
    };
  }

  /* Appends the panel to host; returns the destroy function. */
  HF.exp.panels.parallel = function (store, host) {
    const el = h('div.chart.tall#parallel-chart');
    const selNote = h('span.filter-note#selection-note');
    const clearSel = h('button.btn.small#clear-selection', { hidden: true }, 'Clear brush');
    host.append(h('section.panel', h('div.panel-head', h('h2', 'Hyperparameters vs objective'),
      h('span.hint', 'drag along an axis to brush; the table and charts follow'), h('div.spacer'), selNote, clearSel), el));
    const par = HF.charts.echart(el);
    // ids: trial id of each line; sig / dataSig: the axes and the lines last set.
    const P = { ids: [], sig: '', dataSig: '' };

    /* The brushed trials (null: no axis holds an interval) to the store. */
    function readSelection() {
      let sel = null;
      try {
        const model = par.c.getModel();
        const ser = model && model.getSeries()[0];
        const axes = model ? model.getComponent('parallel') : null;
        // Brushing is active when any axis holds an interval.
        let brushed = false;
        if (axes) model.eachComponent('parallelAxis', (ax) => { if ((ax.activeIntervals || []).length) brushed = true; });
        if (ser && brushed) sel = new Set(ser.getRawIndicesByActiveState('active').map((i) => P.ids[i]));
      } catch (e) { sel = null; }
      store.setSelection(sel);
    }

    const render = HF.throttle(() => {
      if (store.closed) return;
      const { dims, trials } = store.dims();
      P.ids = trials.map((t) => t.id);
      const data = trials.map((t) => dims.map((d) => dimVal(d, t)));
      const sig = JSON.stringify(dims);
      const objs = trials.map((t) => t.objective);
      const lo = objs.length ? Math.min(...objs) : 0, hi = objs.length ? Math.max(...objs) : 1;
      const colors = store.goal() > 0 ? ['#d9e3f7', '#7aa2f0', '#2f6fed', '#0d3aa8'] : ['#0d3aa8', '#2f6fed', '#7aa2f0', '#d9e3f7'];
      const visualMap = { type: 'continuous', dimension: dims.length - 1, min: lo, max: hi === lo ? lo + 1e-9 : hi,
        inRange: { color: colors }, right: 0, top: 'middle', itemHeight: 160, text: [HF.fmtNum(hi), HF.fmtNum(lo)], calculable: false,
        textStyle: { fontSize: 11 } };
      const series = [{ type: 'parallel', data, smooth: false, lineStyle: { width: 1.3, opacity: 0.75 },
        inactiveOpacity: 0.04, activeOpacity: 1, progressive: 0, animation: false,
        emphasis: { lineStyle: { width: 3, opacity: 1 } } }];
      // The same lines again (a throttled call whose trials did not change)
      // are not re-set: re-rendering the axes can interrupt a brush drag.
      const dataSig = JSON.stringify([data, lo, hi]);
      if (sig === P.sig && dataSig === P.dataSig) { readSelection(); return; }
      P.dataSig = dataSig;
      if (sig !== P.sig) {
        P.sig = sig;
        par.c.setOption(chartOption(dims, visualMap, series), { notMerge: true });
      } else {
        par.c.setOption({ visualMap, series });
      }
      HF.charts.emptyNote(el, data.length ? null : 'appears once trials report the objective');
      el.dataset.lines = String(data.length);
      readSelection();
    }, 2000);

    /* Hover on a category label: its full text and how many trials have it. */
    const tip = h('div.curve-tip#parallel-tip', { hidden: true });
    el.append(tip);
    par.c.on('mouseover', (ev) => {
      if (ev.componentType !== 'parallelAxis' || ev.targetType !== 'axisLabel') return;
      const { dims, trials } = store.dims();
      const d = dims[ev.componentIndex];
      if (!d || d.type !== 'category') return;
      const n = trials.filter((t) => dimVal(d, t) === String(ev.value)).length;
      tip.textContent = `${d.key} = ${ev.value} · ${n} trial${n === 1 ? '' : 's'}`;
      const e = ev.event || {};
      tip.style.left = (e.offsetX || 0) + 12 + 'px'; tip.style.top = (e.offsetY || 0) + 12 + 'px';
      tip.hidden = false;
    });
    par.c.on('mouseout', (ev) => { if (ev.componentType === 'parallelAxis') tip.hidden = true; });
    par.c.on('axisareaselected', readSelection);
    clearSel.addEventListener('click', () => {
      // Re-creating the chart drops every axis interval.
      P.sig = ''; render(); render.flush();
    });

    for (const topic of ['all', 'trial', 'objective']) store.on(topic, render);
    store.on('selection', () => {
      const sel = store.selection;
      selNote.textContent = sel ? `${sel.size} trial${sel.size === 1 ? '' : 's'} brushed` : '';
      clearSel.hidden = !sel;
    });
    return () => { render.cancel(); par.destroy(); };
  };
})(window.HF);
