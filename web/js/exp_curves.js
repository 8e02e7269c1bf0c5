/* exp_curves.js — the "Learning curves" panel: every trial's curve of the
 * chosen metric on one chart, a metric select and a log-scale toggle; hover
 * names a trial (and highlights its table row), click opens it.
 *
 * ECharts draws the axes, grid and labels; the curves themselves are
 * stroked on a canvas laid over the grid (one path per trial; 150,000
 * points take a few milliseconds, where chart-library series cost
 * hundreds). Trials are coloured by objective rank, better = darker, as
 * in the parallel coordinates; brushed-out trials are pale. Hover is
 * hit-tested here: the curve whose value at the cursor's x is nearest,
 * within 8 px.
 *
 * The curve data lives in the store (store.curves); this panel redraws on
 * `points` and `selection` (throttled: 0.5 s, 1.5 s past 200 curves) and
 * restrokes the canvas alone on `hover`. Test hooks on #curves-chart:
 * data-series, data-points, data-render-ms, data-hover.
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const BUCKETS = ['#a9c1f0', '#86a8ec', '#5f8be4', '#3a6fdb', '#1f55c2', '#0d3aa8'];

  /* trial id -> rank bucket (0 = worst) among trials with an objective. */
  function rankTrials(store) {
    const rank = new Map();
    const ranked = [...store.trials.values()].filter((t) => typeof t.objective === 'number')
      .sort((x, y) => store.goal() * (x.objective - y.objective));
    ranked.forEach((t, r) => rank.set(t.id, Math.min(BUCKETS.length - 1, Math.floor(r * BUCKETS.length / ranked.length))));
    return rank;
  }

  /* Value extents of the curves in list ([[tid, pts]...]), or null if empty. */
  function curveExtents(list, log) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const [, pts] of list) for (const p of pts) {
      if (p[0] < x0) x0 = p[0]; if (p[0] > x1) x1 = p[0];
      if (p[1] < y0) y0 = p[1]; if (p[1] > y1) y1 = p[1];
    }
    if (!isFinite(x0)) return null;
    if (x1 === x0) x1 = x0 + 1;
    if (x0 >= 0 && x0 <= (x1 - x0) * 0.2) x0 = 0;
    if (y1 === y0) { y0 = log ? y0 / 2 : y0 - (Math.abs(y0) * 0.1 || 1); y1 = log ? y1 * 2 : y1 + (Math.abs(y1) * 0.1 || 1); }
    return { x0, x1, y0, y1 };
  }

  /* Pixel mapping of the ECharts grid (the axes ECharts rounded to nice
   * extents), read back after each render: affine in value (or log10). */
  function gridMap(chart, e, log) {
    if (!e) return null;
    let rect;
    try { rect = chart.getModel().getComponent('grid').coordinateSystem.getRect(); } catch (err) { return null; }
    const f = log ? Math.log10 : (v) => v;
    const px0 = chart.convertToPixel({ xAxisIndex: 0 }, e.x0), px1 = chart.convertToPixel({ xAxisIndex: 0 }, e.x1);
    const py0 = chart.convertToPixel({ yAxisIndex: 0 }, e.y0), py1 = chart.convertToPixel({ yAxisIndex: 0 }, e.y1);
    if (![px0, px1, py0, py1].every(isFinite) || px1 === px0 || py1 === py0) return null;
    const bx = (px1 - px0) / (e.x1 - e.x0), by = (py1 - py0) / (f(e.y1) - f(e.y0));
    return {
      rect,
      X: (v) => px0 + (v - e.x0) * bx,
      Y: (v) => py0 + (f(v) - f(e.y0)) * by,
      xOf: (px) => e.x0 + (px - px0) / bx,
    };
  }

  /* The axes: ECharts rounds them to nice extents around an invisible
   * two-point series; the canvas reads the mapping back (gridMap). */
  function axesOption(e, log, metric) {
    return {
      animation: false,
      grid: { left: 12, right: 24, top: 28, bottom: 34, containLabel: true },
      xAxis: { type: 'value', name: 'step', nameLocation: 'middle', nameGap: 26, scale: true, minInterval: 1,
        splitLine: { lineStyle: { color: '#eef0f4' } }, axisLabel: { hideOverlap: true } },
      yAxis: { type: log ? 'log' : 'value', scale: true, name: metric, nameTextStyle: { align: 'left' },
        splitLine: { lineStyle: { color: '#eef0f4' } }, axisLabel: { hideOverlap: true } },
      series: [{ id: 'extent', type: 'scatter', silent: true, symbolSize: 0, itemStyle: { opacity: 0 },
        data: [[e.x0, e.y0], [e.x1, e.y1]] }],
    };
  }

  /* Strokes the drawn curves ([[tid, pts]...]) on ctx through mapping m:
   * brushed-out trials first, then those without an objective, then by
   * rank; the hovered one last, thick and orange. */
  function strokeCurves(ctx, m, drawn, rank, isSel, hov) {
    ctx.save();
    ctx.beginPath(); ctx.rect(m.rect.x, m.rect.y, m.rect.width, m.rect.height); ctx.clip();
    ctx.lineJoin = 'round';
    const fade = hov != null ? 0.3 : 1;
    const stroke = (pts) => {
      if (pts.length === 1) {   // one report so far: a dot
        ctx.beginPath(); ctx.arc(m.X(pts[0][0]), m.Y(pts[0][1]), ctx.lineWidth + 1.2, 0, 2 * Math.PI);
        ctx.fillStyle = ctx.strokeStyle; ctx.fill();
        return;
      }
      ctx.beginPath();
      ctx.moveTo(m.X(pts[0][0]), m.Y(pts[0][1]));
      for (let k = 1; k < pts.length; k++) ctx.lineTo(m.X(pts[k][0]), m.Y(pts[k][1]));
      ctx.stroke();
    };
    const layers = [[], [], ...BUCKETS.map(() => [])];
    for (const d of drawn) {
      if (!isSel(d[0])) layers[0].push(d);
      else { const b = rank.has(d[0]) ? rank.get(d[0]) : -1; layers[b + 2].push(d); }
    }
    ctx.lineWidth = 1.2;
    layers.forEach((layer, li) => {
      ctx.strokeStyle = li === 0 ? '#d5d9e1' : (li === 1 ? '#9aa3b5' : BUCKETS[li - 2]);
      ctx.globalAlpha = (li === 0 ? 0.5 : 0.85) * fade;
      for (const [, pts] of layer) stroke(pts);
    });
    const hp = hov != null && drawn.find((d) => d[0] === hov);
    if (hp) { ctx.globalAlpha = 1; ctx.lineWidth = 3; ctx.strokeStyle = '#e8590c'; stroke(hp[1]); }
    ctx.restore();
  }

  /* The selected curve nearest to pixel (px, py) within 8 px: {tid, x, y}. */
  function curveAt(m, drawn, isSel, px, py) {
    if (!m || px < m.rect.x || px > m.rect.x + m.rect.width || py < m.rect.y || py > m.rect.y + m.rect.height) return null;
    const x = m.xOf(px);
    let best = null, bestD = 8;
    for (const [tid, pts] of drawn) {
      if (!isSel(tid) || x < pts[0][0] || x > pts[pts.length - 1][0]) continue;
      let lo = 0, hi = pts.length - 1;
      while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (pts[mid][0] <= x) lo = mid; else hi = mid; }
      const a = pts[lo], b = pts[hi];
      const y = b[0] === a[0] ? a[1] : a[1] + (b[1] - a[1]) * (x - a[0]) / (b[0] - a[0]);
      const d = Math.abs(m.Y(y) - py);
      if (d < bestD) { bestD = d; best = { tid, x, y }; }
    }
    return best;
  }

  const trialLabel = (t) => (t && t.hparams ? Object.entries(t.hparams).slice(0, 6).map(([k, v]) => `${k}=${HF.fmtVal(v)}`).join(', ') : '');

  /* Appends the panel to host; returns the destroy function. */
  HF.exp.panels.curves = function (store, host) {
    const el = h('div.chart.tall#curves-chart');
    const metricSel = h('select#metric-select', { 'aria-label': 'metric' });
    const logChk = h('input#log-scale', { type: 'checkbox' });
    const note = h('span.hint#curves-note');
    host.append(h('section.panel', h('div.panel-head', h('h2', 'Learning curves'), h('div.spacer'),
      h('label', 'metric', metricSel), h('label', logChk, 'log scale')), el, note));
    const chart = HF.charts.echart(el);
    const canvas = h('canvas.curve-canvas');
    el.appendChild(canvas);
    const tip = h('div.curve-tip', { hidden: true });
    el.appendChild(tip);
    // ext: value extents drawn; drawn: [[tid, pts]...]; map: gridMap's answer.
    const CV = { log: false, ext: null, extKey: '', drawn: [], rank: new Map(), map: null, loadNote: '', loaded: false };

    function draw() {
      const dpr = window.devicePixelRatio || 1;
      const w = el.clientWidth, hgt = el.clientHeight;
      if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hgt * dpr)) {
        canvas.width = Math.round(w * dpr); canvas.height = Math.round(hgt * dpr);
        canvas.style.width = w + 'px'; canvas.style.height = hgt + 'px';
      }
      const ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, hgt);
      const m = CV.map = gridMap(chart.c, CV.ext, CV.log);
      if (m) strokeCurves(ctx, m, CV.drawn, CV.rank, store.isSel, store.curveHover);
    }

    const render = HF.throttle(() => {
      if (store.closed) return;
      const t0 = performance.now();
      const drawn = [];
      let npts = 0;
      for (const tid of [...store.curves.keys()].sort((a, b) => a - b)) {
        let pts = store.curves.get(tid).pts;
        if (CV.log) pts = pts.filter((p) => p[1] > 0);
        if (!pts.length) continue;
        drawn.push([tid, pts]); npts += pts.length;
      }
      CV.drawn = drawn;
      CV.rank = rankTrials(store);
      const e = curveExtents(drawn, CV.log) || { x0: 0, x1: 1, y0: CV.log ? 0.1 : 0, y1: 1 };
      const extKey = JSON.stringify([e, CV.log, store.metric]);
      CV.ext = e;
      if (extKey !== CV.extKey) { CV.extKey = extKey; chart.c.setOption(axesOption(e, CV.log, store.metric)); }
      draw();
      HF.charts.emptyNote(el, drawn.length ? null : (store.trials.size ? `no ${store.metric} reported yet` : 'no trials yet'));
      el.dataset.series = String(drawn.length);
      el.dataset.points = String(npts);
      if (CV.loaded) note.textContent = `${drawn.length} curves, ${npts.toLocaleString()} points drawn` + CV.loadNote;
      el.dataset.renderMs = String(Math.round(performance.now() - t0));
    }, () => (store.curves.size > 200 ? 1500 : 500));
    chart.c.on('finished', () => { if (!store.closed) draw(); });   // after axis renders and resizes

    function hover(hit, px, py) {
      if (hit) {
        const t = store.trials.get(hit.tid);
        tip.innerHTML = `<b>trial ${hit.tid}</b> ${t ? HF.esc(t.state) : ''}<br>${HF.esc(trialLabel(t))}<br>` +
          `step ${HF.fmtNum(Math.round(hit.x))}: ${HF.esc(store.metric)} ≈ ${HF.fmtNum(hit.y)}`;
        tip.hidden = false;
        tip.style.left = Math.max(0, Math.min(px + 14, el.clientWidth - 260)) + 'px';
        tip.style.top = Math.max(0, py - 64) + 'px';
      } else tip.hidden = true;
      el.style.cursor = hit ? 'pointer' : '';
      store.setCurveHover(hit ? hit.tid : null, 'curves');
    }
    const at = (ev) => { const r = el.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
    let hoverRaf = 0;
    el.addEventListener('mousemove', (ev) => {
      const [px, py] = at(ev);
      cancelAnimationFrame(hoverRaf);
      hoverRaf = requestAnimationFrame(() => hover(curveAt(CV.map, CV.drawn, store.isSel, px, py), px, py));
    });
    el.addEventListener('mouseleave', () => { cancelAnimationFrame(hoverRaf); hover(null); });
    el.addEventListener('click', (ev) => {
      const hit = curveAt(CV.map, CV.drawn, store.isSel, ...at(ev));
      if (hit) location.hash = '#/trials/' + hit.tid;
    });

    metricSel.addEventListener('change', () => store.setMetric(metricSel.value));
    logChk.addEventListener('change', () => { CV.log = logChk.checked; render(); render.flush(); });
    function renderMetricSelect() {
      const names = store.metricNames();
      const cur = [...metricSel.options].map((o) => o.value).join('\n');
      if (cur === names.join('\n')) return;
      metricSel.replaceChildren(...names.map((n) => h('option', { value: n }, n)));
      metricSel.value = store.metric;
    }

    store.on('all', renderMetricSelect);
    store.on('names', renderMetricSelect);
    store.on('points', render);
    store.on('selection', render);
    store.on('hover', (source) => {
      if (source === 'curves') el.dataset.hover = store.curveHover == null ? '' : String(store.curveHover);
      draw();
    });
    store.on('curves-loading', (info) => { note.textContent = `loading ${info.count} curves…`; });
    store.on('curves-loaded', (info) => {
      let n = 0; for (const c of store.curves.values()) n += c.pts.length;
      CV.loadNote = ` (server-downsampled to ≤${info.perTrial} per trial, then live; ${info.count} fetched in ${info.ms} ms)`;
      note.textContent = `${store.curves.size} curves, ${n.toLocaleString()} points drawn` + CV.loadNote;
      CV.loaded = true;
      render.flush();
    });
    return () => { cancelAnimationFrame(hoverRaf); render.cancel(); chart.destroy(); };
  };
})(window.HF);
