/* page_experiment.js — #/experiments/{id}: one sweep in detail.
 *
 *   best-so-far curve (uPlot)         every trial's learning curve (ECharts)
 *   parallel coordinates of hyperparameters vs objective, brushable (ECharts)
 *   scatter of objective against each hyperparameter (ECharts)
 *   ASHA rungs and promotions (searcher_state when the API has it, else
 *   derived from the trials' budgets)
 *   the trial table: sortable, filterable, hyperparameters as columns
 *
 * Scale: built for 1,000 trials and 1,000,000 metric points. Every trial's
 * curve comes in one request (GET /experiments/{id}/metrics?name=&max_points=)
 * that the server downsamples per trial (the total stays near POINT_BUDGET
 * whatever the trial count); afterwards live `metric` events append, and a
 * reconnect fetches only the rows after the last seq seen (&after=).
 * Redraws are throttled (slower when there are many series); the table is
 * rebuilt as one HTML string.
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const POINT_BUDGET = 150000;

  HF.pages = HF.pages || {};
  HF.pages.experiment = function (root, params) {
    const id = +params.id;
    const S = {
      exp: null, trials: new Map(), curves: new Map(), metric: null, log: false,
      selection: null, sort: { key: 'id', dir: 1 }, filter: '', stateFilter: '',
      hover: null, closed: false, dims: [], parIds: [], parSig: '', parDataSig: '',
    };
    const offs = [];
    const charts = [];

    // ---------- layout ----------
    const headTitle = h('h1#exp-title', 'Experiment ' + id);
    const headBadge = h('span');
    const headActions = h('span');
    const statsBox = h('div.stats#exp-stats');
    const bestEl = h('div.chart.tall#best-chart');
    const curvesEl = h('div.chart.tall#curves-chart');
    const metricSel = h('select#metric-select', { 'aria-label': 'metric' });
    const logChk = h('input#log-scale', { type: 'checkbox' });
    const curvesNote = h('span.hint#curves-note');
    const parEl = h('div.chart.tall#parallel-chart');
    const PAR_CAT_CH = 14;   // characters before a category label is truncated
    const selNote = h('span.filter-note#selection-note');
    const clearSel = h('button.btn.small#clear-selection', { hidden: true }, 'Clear brush');
    const scatterGrid = h('div.grid-charts#scatter-grid');
    const rungsPanel = h('section.panel#rungs-panel', { hidden: true });
    const filterIn = h('input#trial-filter', { type: 'search', placeholder: 'filter: text, lr<0.01, optimizer=adam, state=RUNNING', style: { width: '340px' } });
    const stateSel = h('select#state-filter', h('option', { value: '' }, 'all states'),
      ...['QUEUED', 'ASSIGNED', 'RUNNING', 'COMPLETED', 'STOPPED', 'FAILED', 'CANCELED'].map((s) => h('option', { value: s }, s)));
    const tableHead = h('thead');
    const tableBody = h('tbody');
    const table = h('table.data.virtual#trials-table', tableHead, tableBody);
    const tableNote = h('span.hint#table-note');

    root.append(
      h('div.crumbs', h('a', { href: '#/experiments' }, 'Experiments'), ' / ', h('span#exp-crumb', '#' + id)),
      h('div.page-head', headTitle, headBadge, h('div.spacer'), headActions),
      h('section.panel', statsBox),
      h('div.grid2', { style: { marginBottom: '16px' } },
        h('section.panel', h('div.panel-head', h('h2', 'Best so far'), h('span.hint', 'objective of each trial (dots) and the running best (line) over time')), bestEl),
        h('section.panel', h('div.panel-head', h('h2', 'Learning curves'), h('div.spacer'),
          h('label', 'metric', metricSel), h('label', logChk, 'log scale')), curvesEl, curvesNote)),
      h('section.panel', h('div.panel-head', h('h2', 'Hyperparameters vs objective'),
        h('span.hint', 'drag along an axis to brush; the table and charts follow'), h('div.spacer'), selNote, clearSel), parEl),
      h('section.panel', h('div.panel-head', h('h2', 'Objective vs each hyperparameter')), scatterGrid),
      rungsPanel,
      h('section.panel', h('div.panel-head', h('h2', 'Trials'), tableNote, h('div.spacer'), filterIn, stateSel),
        h('div.table-card', h('div.table-wrap', table))));

    const bestChart = HF.charts.uplot(bestEl, {
      legend: { show: true },
      cursor: { points: { size: 6 } },
      scales: { x: { time: true }, y: { auto: true } },
      axes: [{ grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } },
        { values: HF.charts.fmtTicks, size: 56, grid: { stroke: '#eef0f4' }, ticks: { stroke: '#e2e5eb' } }],
      series: [{ label: 'time' },
        { label: 'trial objective', stroke: '#9aa3b5', width: 0, paths: () => null, points: { show: true, size: 5, fill: '#9aa3b5' },
          value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) },
        { label: 'best so far', stroke: '#1f9d55', width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false },
          value: (u, v) => (v == null ? '–' : HF.fmtNum(v)) }],
    }, [[], [], []]);
    charts.push(bestChart);
    const curves = HF.charts.echart(curvesEl); charts.push(curves);
    const par = HF.charts.echart(parEl); charts.push(par);
    let scatters = [];

    // ---------- helpers ----------
    const goal = () => (S.exp && S.exp.objective && S.exp.objective.goal === 'minimize' ? -1 : 1);
    const objMetric = () => (S.exp && S.exp.objective && S.exp.objective.metric) || 'objective';
    const better = (a, b) => (b == null || (a != null && goal() * (a - b) > 0));
    const isSel = (tid) => !S.selection || S.selection.has(tid);

    function hparamKeys() {
      const cfg = S.exp && S.exp.config && S.exp.config.hyperparameters;
      const keys = new Set();
      if (cfg && typeof cfg === 'object') for (const k of Object.keys(cfg)) keys.add(k);
      for (const t of S.trials.values()) for (const k of Object.keys(t.hparams || {})) keys.add(k);
      return [...keys];
    }
    /* Hyperparameters that are searched (spec objects) or vary across trials. */
    function searchedKeys() {
      const cfg = (S.exp && S.exp.config && S.exp.config.hyperparameters) || {};
      return hparamKeys().filter((k) => {
        if (cfg[k] && typeof cfg[k] === 'object' && !Array.isArray(cfg[k])) return true;
        const vals = new Set();
        for (const t of S.trials.values()) { vals.add(JSON.stringify((t.hparams || {})[k])); if (vals.size > 1) return true; }
        return false;
      });
    }
    const specOf = (k) => ((S.exp && S.exp.config && S.exp.config.hyperparameters) || {})[k] || {};

    function metricNames() {
      const names = new Set();
      for (const t of S.trials.values()) { HF.metricNames(t.latest).forEach((n) => names.add(n)); HF.metricNames(t.best).forEach((n) => names.add(n)); }
      names.add(objMetric());
      return [...names].sort();
    }

    // ---------- header ----------
    function renderHead() {
      const e = S.exp;
      if (!e) return;
      headTitle.textContent = e.name || ('Experiment ' + id);
      const cr = root.querySelector('#exp-crumb'); if (cr) cr.textContent = `#${id} ${e.name || ''}`;
      headBadge.replaceChildren(HF.badge(e.state));
      headActions.replaceChildren(HF.experimentActions(e, (r) => { S.exp = Object.assign(S.exp, r); renderHead(); }));
      document.title = (e.name || 'experiment') + ' · hyperfarm';
      const c = e.counts || {};
      const stat = (v, l, extra) => h('div.stat', extra || {}, h('div.v', v), h('div.l', l));
      const obj = e.objective || {};
      statsBox.replaceChildren(
        stat(e.best && e.best.value != null ? HF.fmtNum(e.best.value) : '–', `best ${obj.metric || ''} (${obj.goal || ''})`, { id: 'best-stat' }),
        stat(e.best && e.best.trial_id != null ? h('a', { href: '#/trials/' + e.best.trial_id }, '#' + e.best.trial_id) : '–', 'best trial'),
        stat(e.searcher || '', 'searcher'),
        stat(`${(c.completed || 0) + (c.stopped || 0)}`, 'done'),
        stat(`${(c.running || 0) + (c.assigned || 0)}`, 'running', { id: 'running-stat' }),
        stat(`${c.queued || 0}`, 'queued'),
        stat(`${c.failed || 0}`, 'failed'),
        stat(e.max_trials != null ? String(e.max_trials) : '–', 'max trials'),
        stat(HF.fmtTime(e.created_at), 'started'),
        stat(HF.fmtDur((e.ended_at || Date.now()) - e.created_at), e.ended_at ? 'took' : 'running for'));
    }

    // ---------- best so far ----------
    const renderBest = HF.throttle(() => {
      if (S.closed) return;
      const pts = [];
      const now = Date.now();
      for (const t of S.trials.values()) {
        if (t.objective == null || typeof t.objective !== 'number') continue;
        const when = HF.TERMINAL.has(t.state) ? (t.ended_at || now) : now;
        pts.push([when / 1000, t.objective]);
      }
      pts.sort((a, b) => a[0] - b[0]);
      const xs = [], ys = [], bs = [];
      let best = null;
      for (const [x, y] of pts) { if (better(y, best)) best = y; xs.push(x); ys.push(y); bs.push(best); }
      if (xs.length) {
        // The running best extends to now; a very short span gets a margin
        // (uPlot would widen a zero-width time range to days).
        const end = Math.max(xs[xs.length - 1], (S.exp && S.exp.ended_at ? S.exp.ended_at : now) / 1000);
        if (end > xs[xs.length - 1]) { xs.push(end); ys.push(null); bs.push(best); }
        if (xs[xs.length - 1] - xs[0] < 10) {
          const pad = (10 - (xs[xs.length - 1] - xs[0])) / 2;
          xs.unshift(xs[0] - pad); ys.unshift(null); bs.unshift(null);
          xs.push(xs[xs.length - 1] + pad); ys.push(null); bs.push(null);
        }
      }
      bestChart.setData([xs, ys, bs]);
      HF.charts.emptyNote(bestEl, xs.length ? null : 'no trial has reported the objective yet');
    }, 1500);

    // ---------- learning curves ----------
    function curveOf(tid) {
      let c = S.curves.get(tid);
      if (!c) { c = { pts: [], next: 0, loaded: false }; S.curves.set(tid, c); }
      return c;
    }
    function perTrialPoints() {
      return Math.max(30, Math.min(2000, Math.floor(POINT_BUDGET / Math.max(1, S.trials.size))));
    }

    /* One trial's series from the experiment-wide metrics route: points are
     * [x, value] with x = step, else epoch, else seq. */
    function addSeries(tid, points) {
      const c = curveOf(tid);
      const add = (points || []).filter((p) => p[0] != null && typeof p[1] === 'number');
      if (!c.loaded) {
        // Keep live points that arrived while fetching if they lie past the fetched ones.
        const lastX = add.length ? add[add.length - 1][0] : -Infinity;
        c.pts = add.concat(c.pts.filter((p) => p[0] > lastX));
      } else {
        const last = c.pts[c.pts.length - 1];
        c.pts.push(...add.filter((p) => !last || p[0] > last[0]));
      }
      c.loaded = true;
      capCurve(c);
    }
    /* Live points are appended without downsampling; halve a curve that grows
     * past twice its share so memory and draw time stay bounded. */
    function capCurve(c) {
      const cap = 2 * perTrialPoints();
      if (c.pts.length <= cap) return;
      const last = c.pts[c.pts.length - 1];
      c.pts = c.pts.filter((_, k) => k % 2 === 0);
      if (c.pts[c.pts.length - 1] !== last) c.pts.push(last);
    }

    async function loadCurves(incremental) {
      if (!S.metric) return;
      if (!incremental || !S.curvesNext) { S.gen = (S.gen || 0) + 1; S.curves.clear(); S.curvesNext = 0; }
      const gen = S.gen;
      const ids = [...S.trials.keys()].sort((a, b) => b - a);
      const t0 = performance.now();
      curvesNote.textContent = `loading ${ids.length} curves…`;
      try {
        const url = `/api/v1/experiments/${id}/metrics?name=${encodeURIComponent(S.metric)}` +
          `&max_points=${perTrialPoints()}` + (S.curvesNext ? `&after=${S.curvesNext}` : '');
        const r = await HF.api.get(url);
        if (gen !== S.gen || S.closed) return;
        for (const s of r.series || []) addSeries(s.trial_id, s.points);
        for (const tid of ids) curveOf(tid).loaded = true;   // trials without points yet
        if (r.next != null) S.curvesNext = Math.max(S.curvesNext, r.next);
        renderCurves();
      } catch (e) { if (e.status !== 401) HF.toast('loading curves failed: ' + e.message, true); }
      if (gen !== S.gen || S.closed) return;
      let n = 0; for (const c of S.curves.values()) n += c.pts.length;
      CV.loadNote = ` (server-downsampled to ≤${perTrialPoints()} per trial, then live; ${ids.length} fetched in ${Math.round(performance.now() - t0)} ms)`;
      curvesNote.textContent = `${S.curves.size} curves, ${n.toLocaleString()} points drawn` + CV.loadNote;
      root.dataset.curvesLoaded = '1';
      renderCurves.flush();
    }

    const trialLabel = (t) => {
      const hp = t && t.hparams ? Object.entries(t.hparams).slice(0, 6).map(([k, v]) => `${k}=${HF.fmtVal(v)}`).join(', ') : '';
      return hp;
    };

    /* ECharts draws the axes, grid and labels; the curves themselves are
     * stroked on a canvas laid over the grid (one path per trial; 150,000
     * points take a few milliseconds, where chart-library series cost
     * hundreds). Trials are coloured by objective rank, better = darker, as
     * in the parallel coordinates. Hover is hit-tested here: the curve whose
     * value at the cursor's x is nearest, within 8 px. */
    const BUCKETS = ['#a9c1f0', '#86a8ec', '#5f8be4', '#3a6fdb', '#1f55c2', '#0d3aa8'];
    const CV = { ext: null, drawn: [], rank: new Map(), map: null, loadNote: '' };
    const canvas = h('canvas.curve-canvas');
    curvesEl.appendChild(canvas);

    function rankTrials() {
      CV.rank = new Map();
      const ranked = [...S.trials.values()].filter((t) => typeof t.objective === 'number')
        .sort((x, y) => goal() * (x.objective - y.objective));
      ranked.forEach((t, r) => CV.rank.set(t.id, Math.min(BUCKETS.length - 1, Math.floor(r * BUCKETS.length / ranked.length))));
    }

    function curveExtents(list) {
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      for (const [, pts] of list) for (const p of pts) {
        if (p[0] < x0) x0 = p[0]; if (p[0] > x1) x1 = p[0];
        if (p[1] < y0) y0 = p[1]; if (p[1] > y1) y1 = p[1];
      }
      if (!isFinite(x0)) return null;
      if (x1 === x0) x1 = x0 + 1;
      if (x0 >= 0 && x0 <= (x1 - x0) * 0.2) x0 = 0;
      if (y1 === y0) { y0 = S.log ? y0 / 2 : y0 - (Math.abs(y0) * 0.1 || 1); y1 = S.log ? y1 * 2 : y1 + (Math.abs(y1) * 0.1 || 1); }
      return { x0, x1, y0, y1 };
    }

    /* Pixel mapping of the ECharts grid (the axes ECharts rounded to nice
     * extents), read back after each render: affine in value (or log10). */
    function gridMap() {
      if (!CV.ext) return null;
      let rect;
      try { rect = curves.c.getModel().getComponent('grid').coordinateSystem.getRect(); } catch (err) { return null; }
      const f = S.log ? Math.log10 : (v) => v;
      const e = CV.ext;
      const px0 = curves.c.convertToPixel({ xAxisIndex: 0 }, e.x0), px1 = curves.c.convertToPixel({ xAxisIndex: 0 }, e.x1);
      const py0 = curves.c.convertToPixel({ yAxisIndex: 0 }, e.y0), py1 = curves.c.convertToPixel({ yAxisIndex: 0 }, e.y1);
      if (![px0, px1, py0, py1].every(isFinite) || px1 === px0 || py1 === py0) return null;
      const bx = (px1 - px0) / (e.x1 - e.x0), by = (py1 - py0) / (f(e.y1) - f(e.y0));
      return {
        rect,
        X: (v) => px0 + (v - e.x0) * bx,
        Y: (v) => py0 + (f(v) - f(e.y0)) * by,
        xOf: (px) => e.x0 + (px - px0) / bx,
      };
    }

    function drawCurves() {
      const dpr = window.devicePixelRatio || 1;
      const w = curvesEl.clientWidth, hgt = curvesEl.clientHeight;
      if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hgt * dpr)) {
        canvas.width = Math.round(w * dpr); canvas.height = Math.round(hgt * dpr);
        canvas.style.width = w + 'px'; canvas.style.height = hgt + 'px';
      }
      const ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, hgt);
      const m = CV.map = gridMap();
      if (!m) return;
      ctx.save();
      ctx.beginPath(); ctx.rect(m.rect.x, m.rect.y, m.rect.width, m.rect.height); ctx.clip();
      ctx.lineJoin = 'round';
      const hov = S.curveHover;
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
      // Unselected (brushed out) first, then no-objective, then by rank.
      const layers = [[], [], ...BUCKETS.map(() => [])];
      for (const d of CV.drawn) {
        if (!isSel(d[0])) layers[0].push(d);
        else { const b = CV.rank.has(d[0]) ? CV.rank.get(d[0]) : -1; layers[b + 2].push(d); }
      }
      ctx.lineWidth = 1.2;
      layers.forEach((layer, li) => {
        ctx.strokeStyle = li === 0 ? '#d5d9e1' : (li === 1 ? '#9aa3b5' : BUCKETS[li - 2]);
        ctx.globalAlpha = (li === 0 ? 0.5 : 0.85) * fade;
        for (const [, pts] of layer) stroke(pts);
      });
      const hp = hov != null && CV.drawn.find((d) => d[0] === hov);
      if (hp) { ctx.globalAlpha = 1; ctx.lineWidth = 3; ctx.strokeStyle = '#e8590c'; stroke(hp[1]); }
      ctx.restore();
    }

    const renderCurves = HF.throttle(() => {
      if (S.closed) return;
      const t0 = performance.now();
      const drawn = [];
      let npts = 0;
      for (const tid of [...S.curves.keys()].sort((a, b) => a - b)) {
        let pts = S.curves.get(tid).pts;
        if (S.log) pts = pts.filter((p) => p[1] > 0);
        if (!pts.length) continue;
        drawn.push([tid, pts]); npts += pts.length;
      }
      CV.drawn = drawn;
      rankTrials();
      const ext = curveExtents(drawn);
      const e = ext || { x0: 0, x1: 1, y0: S.log ? 0.1 : 0, y1: 1 };
      const extKey = JSON.stringify([e, S.log, S.metric]);
      CV.ext = e;
      if (extKey !== CV.extKey) {
        CV.extKey = extKey;
        // ECharts rounds the axes to nice extents around an invisible
        // two-point series; the canvas reads the mapping back (gridMap).
        curves.c.setOption({
          animation: false,
          grid: { left: 60, right: 24, top: 24, bottom: 40 },
          xAxis: { type: 'value', name: 'step', nameLocation: 'middle', nameGap: 26, scale: true,
            splitLine: { lineStyle: { color: '#eef0f4' } }, axisLabel: { formatter: (v) => HF.fmtNum(v, 3) } },
          yAxis: { type: S.log ? 'log' : 'value', scale: true, name: S.metric, nameTextStyle: { align: 'left' },
            splitLine: { lineStyle: { color: '#eef0f4' } }, axisLabel: { formatter: (v) => HF.fmtNum(v, 3) } },
          series: [{ id: 'extent', type: 'scatter', silent: true, symbolSize: 0, itemStyle: { opacity: 0 },
            data: [[e.x0, e.y0], [e.x1, e.y1]] }],
        });
      }
      drawCurves();
      HF.charts.emptyNote(curvesEl, drawn.length ? null : (S.trials.size ? `no ${S.metric} reported yet` : 'no trials yet'));
      curvesEl.dataset.series = String(drawn.length);
      curvesEl.dataset.points = String(npts);
      if (root.dataset.curvesLoaded) curvesNote.textContent = `${drawn.length} curves, ${npts.toLocaleString()} points drawn` + CV.loadNote;
      curvesEl.dataset.renderMs = String(Math.round(performance.now() - t0));
    }, () => (S.curves.size > 200 ? 1500 : 500));
    curves.c.on('finished', () => { if (!S.closed) drawCurves(); });   // after axis renders and resizes

    const tip = h('div.curve-tip', { hidden: true });
    curvesEl.appendChild(tip);
    function curveAt(px, py) {
      const m = CV.map;
      if (!m || px < m.rect.x || px > m.rect.x + m.rect.width || py < m.rect.y || py > m.rect.y + m.rect.height) return null;
      const x = m.xOf(px);
      let best = null, bestD = 8;
      for (const [tid, pts] of CV.drawn) {
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
    function setCurveHover(hit, px, py) {
      const tid = hit ? hit.tid : null;
      if (hit) {
        const t = S.trials.get(tid);
        tip.innerHTML = `<b>trial ${tid}</b> ${t ? HF.esc(t.state) : ''}<br>${HF.esc(trialLabel(t))}<br>` +
          `step ${HF.fmtNum(Math.round(hit.x))}: ${HF.esc(S.metric)} ≈ ${HF.fmtNum(hit.y)}`;
        tip.hidden = false;
        tip.style.left = Math.max(0, Math.min(px + 14, curvesEl.clientWidth - 260)) + 'px';
        tip.style.top = Math.max(0, py - 64) + 'px';
      } else tip.hidden = true;
      curvesEl.style.cursor = hit ? 'pointer' : '';
      if (tid === S.curveHover) return;
      S.curveHover = tid;
      curvesEl.dataset.hover = tid == null ? '' : String(tid);
      drawCurves();
      highlightRow(tid);
    }
    let hoverRaf = 0;
    curvesEl.addEventListener('mousemove', (ev) => {
      const r = curvesEl.getBoundingClientRect();
      const px = ev.clientX - r.left, py = ev.clientY - r.top;
      cancelAnimationFrame(hoverRaf);
      hoverRaf = requestAnimationFrame(() => setCurveHover(curveAt(px, py), px, py));
    });
    curvesEl.addEventListener('mouseleave', () => { cancelAnimationFrame(hoverRaf); setCurveHover(null); });
    curvesEl.addEventListener('click', (ev) => {
      const r = curvesEl.getBoundingClientRect();
      const hit = curveAt(ev.clientX - r.left, ev.clientY - r.top);
      if (hit) location.hash = '#/trials/' + hit.tid;
    });

    function highlightRow(tid) {
      if (S.hover === tid) return;
      const prev = S.hover != null && tableBody.querySelector(`tr[data-id="${S.hover}"]`);
      if (prev) prev.classList.remove('hl');
      S.hover = tid;
      const row = tid != null && tableBody.querySelector(`tr[data-id="${tid}"]`);
      if (row) row.classList.add('hl');
    }

    metricSel.addEventListener('change', () => { S.metric = metricSel.value; loadCurves(false); renderTable(); });
    logChk.addEventListener('change', () => { S.log = logChk.checked; renderCurves(); renderCurves.flush(); });

    function renderMetricSelect() {
      const names = metricNames();
      const cur = [...metricSel.options].map((o) => o.value).join('\n');
      if (cur === names.join('\n')) return;
      metricSel.replaceChildren(...names.map((n) => h('option', { value: n }, n)));
      metricSel.value = S.metric;
    }

    // ---------- parallel coordinates ----------
    function buildDims() {
      const keys = searchedKeys();
      const trials = [...S.trials.values()].filter((t) => typeof t.objective === 'number');
      const dims = keys.map((k) => {
        const vals = trials.map((t) => (t.hparams || {})[k]);
        const numeric = vals.every((v) => typeof v === 'number');
        const spec = specOf(k);
        if (numeric) {
          const log = spec.type === 'log' && vals.every((v) => v > 0);
          return { key: k, type: log ? 'log' : 'value' };
        }
        const cats = [...new Set(vals.map((v) => (v == null ? 'null' : (typeof v === 'object' ? JSON.stringify(v) : String(v)))))].sort();
        return { key: k, type: 'category', cats };
      });
      dims.push({ key: objMetric(), type: 'value', objective: true });
      return { dims, trials };
    }
    const dimVal = (d, t) => {
      if (d.objective) return t.objective;
      const v = (t.hparams || {})[d.key];
      if (d.type === 'category') return v == null ? 'null' : (typeof v === 'object' ? JSON.stringify(v) : String(v));
      return v;
    };

    const renderParallel = HF.throttle(() => {
      if (S.closed) return;
      const { dims, trials } = buildDims();
      S.parIds = trials.map((t) => t.id);
      const data = trials.map((t) => dims.map((d) => dimVal(d, t)));
      const sig = JSON.stringify(dims);
      const objs = trials.map((t) => t.objective);
      const lo = objs.length ? Math.min(...objs) : 0, hi = objs.length ? Math.max(...objs) : 1;
      const colors = goal() > 0 ? ['#d9e3f7', '#7aa2f0', '#2f6fed', '#0d3aa8'] : ['#0d3aa8', '#2f6fed', '#7aa2f0', '#d9e3f7'];
      const visualMap = { type: 'continuous', dimension: dims.length - 1, min: lo, max: hi === lo ? lo + 1e-9 : hi,
        inRange: { color: colors }, right: 0, top: 'middle', itemHeight: 160, text: [HF.fmtNum(hi), HF.fmtNum(lo)], calculable: false,
        textStyle: { fontSize: 11 } };
      const series = [{ type: 'parallel', data, smooth: false, lineStyle: { width: 1.3, opacity: 0.75 },
        inactiveOpacity: 0.04, activeOpacity: 1, progressive: 0, animation: false,
        emphasis: { lineStyle: { width: 3, opacity: 1 } } }];
      // The same lines again (a throttled call whose trials did not change)
      // are not re-set: re-rendering the axes can interrupt a brush drag.
      const dataSig = JSON.stringify([data, lo, hi]);
      if (sig === S.parSig && dataSig === S.parDataSig) { readSelection(); return; }
      S.parDataSig = dataSig;
      if (sig !== S.parSig) {
        S.parSig = sig;
        par.c.setOption({
          animation: false,
          parallel: { left: 70, right: 90, top: 36, bottom: 28, parallelAxisDefault: {
            nameLocation: 'end', nameGap: 14, nameTextStyle: { fontSize: 12, color: '#3b4352', fontWeight: 600 },
            // Labels sit on a white plate above the lines (axes at z 3,
            // series at 2) so crossing lines do not run through them.
            axisLabel: { fontSize: 11, color: '#3b4352', formatter: (v) => (typeof v === 'number' ? HF.fmtNum(v, 3) : v),
              backgroundColor: 'rgba(255,255,255,.88)', padding: [1, 3], borderRadius: 3 },
            areaSelectStyle: { width: 18, borderColor: '#2f6fed', color: 'rgba(47,111,237,.18)' } } },
          // Category labels: chips, truncated past PAR_CAT_CH chars; the full
          // value and its trial count show on hover (axisLabelTip below).
          parallelAxis: dims.map((d, i) => ({ dim: i, name: d.key + (d.objective ? ' ★' : ''), type: d.type,
            data: d.cats, scale: d.type === 'value', z: 3, triggerEvent: d.type === 'category',
            axisLabel: d.type === 'category' ? { formatter: (v) => (v.length > PAR_CAT_CH ? v.slice(0, PAR_CAT_CH - 1) + '…' : v),
              fontWeight: 600, lineHeight: 15, backgroundColor: '#fff', borderColor: '#c9d1df', borderWidth: 1, padding: [1, 5], margin: 8 } : {} })),
          visualMap, series,
          tooltip: { show: false },
        }, { notMerge: true });
      } else {
        par.c.setOption({ visualMap, series });
      }
      HF.charts.emptyNote(parEl, data.length ? null : 'appears once trials report the objective');
      parEl.dataset.lines = String(data.length);
      readSelection();
    }, 2000);

    /* Hover on a category label: its full text and how many trials have it. */
    const parTip = h('div.curve-tip#parallel-tip', { hidden: true });
    parEl.append(parTip);
    par.c.on('mouseover', (ev) => {
      if (ev.componentType !== 'parallelAxis' || ev.targetType !== 'axisLabel') return;
      const { dims, trials } = buildDims();
      const d = dims[ev.componentIndex];
      if (!d || d.type !== 'category') return;
      const n = trials.filter((t) => dimVal(d, t) === String(ev.value)).length;
      parTip.textContent = `${d.key} = ${ev.value} · ${n} trial${n === 1 ? '' : 's'}`;
      const e = ev.event || {};
      parTip.style.left = (e.offsetX || 0) + 12 + 'px'; parTip.style.top = (e.offsetY || 0) + 12 + 'px';
      parTip.hidden = false;
    });
    par.c.on('mouseout', (ev) => { if (ev.componentType === 'parallelAxis') parTip.hidden = true; });

    function readSelection() {
      let sel = null;
      try {
        const model = par.c.getModel();
        const ser = model && model.getSeries()[0];
        const axes = model ? model.getComponent('parallel') : null;
        // Brushing is active when any axis holds an interval.
        let brushed = false;
        if (axes) model.eachComponent('parallelAxis', (ax) => { if ((ax.activeIntervals || []).length) brushed = true; });
        if (ser && brushed) sel = new Set(ser.getRawIndicesByActiveState('active').map((i) => S.parIds[i]));
      } catch (e) { sel = null; }
      const key = (s) => (s ? [...s].sort((a, b) => a - b).join(',') : '');
      if (key(sel) === key(S.selection)) return;
      S.selection = sel;
      selNote.textContent = sel ? `${sel.size} trial${sel.size === 1 ? '' : 's'} brushed` : '';
      clearSel.hidden = !sel;
      renderTable(); renderCurves(); renderScatter();
    }
    par.c.on('axisareaselected', readSelection);
    clearSel.addEventListener('click', () => {
      // Re-creating the chart drops every axis interval.
      S.parSig = ''; renderParallel(); renderParallel.flush();
    });

    // ---------- scatter per hyperparameter ----------
    const renderScatter = HF.throttle(() => {
      if (S.closed) return;
      const { dims, trials } = buildDims();
      const hp = dims.filter((d) => !d.objective);
      if (scatters.length !== hp.length || scatters.some((s, i) => s.key !== hp[i].key)) {
        scatters.forEach((s) => s.chart.destroy());
        scatterGrid.replaceChildren();
        scatters = hp.map((d) => {
          const el = h('div.chart.small');
          scatterGrid.append(h('div.chart-box', { 'data-hparam': d.key }, h('h3', `${objMetric()} vs ${d.key}`), el));
          const chart = HF.charts.echart(el);
          chart.c.on('click', (p) => { if (p.value && p.value[2] != null) location.hash = '#/trials/' + p.value[2]; });
          return { key: d.key, chart, el };
        });
        if (!hp.length) scatterGrid.append(h('div.empty', 'no searched hyperparameters yet'));
      }
      hp.forEach((d, i) => {
        const on = [], off = [];
        for (const t of trials) (isSel(t.id) ? on : off).push([dimVal(d, t), t.objective, t.id]);
        scatters[i].chart.c.setOption({
          animation: false,
          grid: { left: 52, right: 14, top: 10, bottom: 34 },
          tooltip: { trigger: 'item', formatter: (p) => `trial ${p.value[2]}<br>${HF.esc(d.key)} = ${HF.fmtVal(p.value[0])}<br>${HF.esc(objMetric())} = ${HF.fmtNum(p.value[1])}` },
          xAxis: d.type === 'category' ? { type: 'category', data: d.cats, name: d.key, nameLocation: 'middle', nameGap: 22,
            axisLabel: { interval: 0, hideOverlap: true, formatter: (v) => (v.length > PAR_CAT_CH ? v.slice(0, PAR_CAT_CH - 1) + '…' : v) } }
            : { type: d.type, scale: true, name: d.key, nameLocation: 'middle', nameGap: 22, axisLabel: { formatter: (v) => HF.fmtNum(v, 3) }, splitLine: { lineStyle: { color: '#eef0f4' } } },
          yAxis: { type: 'value', scale: true, axisLabel: { formatter: (v) => HF.fmtNum(v, 3) }, splitLine: { lineStyle: { color: '#eef0f4' } } },
          series: [
            { type: 'scatter', name: 'other', data: off, symbolSize: 5, itemStyle: { color: '#c9ced8' }, large: off.length > 2000 },
            { type: 'scatter', name: 'trials', data: on, symbolSize: 7, itemStyle: { color: '#2f6fed', opacity: 0.8 }, large: on.length > 2000 },
          ],
        }, { replaceMerge: ['series'] });
        HF.charts.emptyNote(scatters[i].el, trials.length ? null : 'no objective yet');
      });
    }, 2500);

    // ---------- ASHA rungs ----------
    /* ASHA: GET /experiments/{id} carries searcher_state =
     * {algorithm, mode, reduction_factor, brackets: [{bracket, rungs:
     * [{budget, results, promoted, running}]}]} (counts). Which trials sit in
     * a rung is derived from each trial's granted budget: a trial whose
     * budget exceeds a rung's budget was promoted past it. */
    function renderRungs() {
      const e = S.exp;
      if (!e) return;
      const st = e.searcher_state;
      const isAsha = /asha|hyperband/i.test(e.searcher || '') || (st && (st.brackets || st.rungs));
      rungsPanel.hidden = !isAsha;
      if (!isAsha) return;
      const trials = [...S.trials.values()].filter((t) => typeof t.budget === 'number');
      const chips = (b, nextB) => {
        const ids = trials.filter((t) => t.budget >= b).sort((x, y) => (better(x.objective, y.objective) ? -1 : 1));
        const out = ids.slice(0, 40).map((t) => {
          const promoted = nextB != null && t.budget >= nextB;
          return h('a.chip' + (promoted ? '.promoted' : ''), { href: '#/trials/' + t.id, title: promoted ? 'promoted' : (t.state || '') }, '#' + t.id);
        });
        if (ids.length > 40) out.push(h('span.muted', ` +${ids.length - 40} more`));
        return out;
      };
      let brackets = [];
      if (st && Array.isArray(st.brackets)) brackets = st.brackets;
      else if (st && Array.isArray(st.rungs)) brackets = [{ bracket: 0, rungs: st.rungs }];
      const single = brackets.length <= 1;
      const body = [];
      if (brackets.length) {
        for (const br of brackets) {
          const rungs = br.rungs || [];
          rungs.forEach((r, k) => {
            const nextB = rungs[k + 1] ? rungs[k + 1].budget : null;
            body.push(h('tr', h('td', brackets.length > 1 ? `${br.bracket}` : ''), h('td', k), h('td.num', HF.fmtVal(r.budget)),
              h('td.num', HF.fmtVal(r.results)), h('td.num', HF.fmtVal(r.promoted)), h('td.num', HF.fmtVal(r.running)),
              h('td', { style: { whiteSpace: 'normal' } }, single ? chips(r.budget, nextB) : '')));
          });
        }
      } else {
        const budgets = [...new Set(trials.map((t) => t.budget))].sort((x, y) => x - y);
        budgets.forEach((b, k) => {
          const n = trials.filter((t) => t.budget >= b).length;
          const p = budgets[k + 1] != null ? trials.filter((t) => t.budget >= budgets[k + 1]).length : 0;
          body.push(h('tr', h('td', ''), h('td', k), h('td.num', b), h('td.num', n), h('td.num', p), h('td.num', ''),
            h('td', { style: { whiteSpace: 'normal' } }, chips(b, budgets[k + 1]))));
        });
      }
      const sampler = st && st.sampler === 'tpe' ?
        (st.model ? `, new trials from TPE over ${st.observations} rung results` : `, TPE sampler (priors until enough rung results: ${st.observations || 0})`) : '';
      const hint = st ? `${st.mode || ''} mode, reduction factor ${st.reduction_factor != null ? st.reduction_factor : '?'}${sampler}` :
        'derived from the trials\' budgets (the scheduler reports no searcher_state)';
      rungsPanel.replaceChildren(
        h('div.panel-head', h('h2', 'ASHA rungs'), h('span.hint', hint)),
        body.length ? h('div.table-wrap', { style: { maxHeight: '420px' } }, h('table.data.rungs#rungs-table',
          h('thead', h('tr', h('th', brackets.length > 1 ? 'bracket' : ''), h('th', 'rung'), h('th.num', 'budget'), h('th.num', 'results'),
            h('th.num', 'promoted'), h('th.num', 'running'), h('th', single ? 'trials that reached it, best first (green = promoted)' : ''))),
          h('tbody', body)))
          : h('div.empty', 'no rung reached yet'));
    }

    // ---------- trial table ----------
    function columns() {
      const m = S.metric || objMetric();
      const hp = hparamKeys();
      return [
        { key: 'id', label: 'ID', num: true, get: (t) => t.id },
        { key: 'state', label: 'State', get: (t) => t.state },
        ...hp.map((k) => ({ key: 'hp:' + k, label: k, num: !(specOf(k).values || []).some((v) => typeof v !== 'number'), get: (t) => (t.hparams || {})[k] })),
        { key: 'best', label: 'best ' + m, num: true, get: (t) => (t.best || {})[m] },
        { key: 'latest', label: 'latest ' + m, num: true, get: (t) => (t.latest || {})[m] },
        { key: 'step', label: 'step', num: true, get: (t) => (t.latest || {}).step },
        { key: 'budget', label: 'budget', num: true, get: (t) => t.budget },
        { key: 'restarts', label: 'restarts', num: true, get: (t) => t.restarts },
        { key: 'agent', label: 'agent', get: (t) => t.agent || (t.agent_id != null ? '#' + t.agent_id : null) },
        { key: 'started', label: 'started', get: (t) => t.started_at, fmt: (v) => HF.fmtClock(v).slice(0, 8) },
        { key: 'dur', label: 'duration', num: true, get: (t) => (t.started_at ? (t.ended_at || Date.now()) - t.started_at : null), fmt: HF.fmtDur },
      ];
    }

    /* Filter terms: "key<v", "key>=v", "key=v", "key!=v" on column keys or
     * labels (hparam names, state, agent...), anything else is a substring. */
    function makeFilter(cols) {
      const terms = S.filter.trim().split(/\s+/).filter(Boolean);
      const byName = new Map();
      for (const c of cols) { byName.set(c.label.toLowerCase(), c); byName.set(c.key.replace(/^hp:/, '').toLowerCase(), c); }
      const preds = terms.map((term) => {
        const m = /^([\w.-]+)\s*(<=|>=|!=|=|<|>)\s*(.+)$/.exec(term);
        const col = m && byName.get(m[1].toLowerCase());
        if (col) {
          const raw = m[3], num = Number(raw), isNum = raw !== '' && !isNaN(num);
          return (t) => {
            const v = col.get(t);
            if (v == null) return false;
            const a = typeof v === 'number' && isNum ? v : String(v).toLowerCase();
            const b = typeof v === 'number' && isNum ? num : raw.toLowerCase();
            switch (m[2]) {
              case '<': return a < b; case '>': return a > b; case '<=': return a <= b; case '>=': return a >= b;
              case '!=': return a !== b; default: return a === b;
            }
          };
        }
        const needle = term.toLowerCase();
        return (t) => cols.some((c) => { const v = c.get(t); return v != null && String(v).toLowerCase().includes(needle); });
      });
      return (t) => preds.every((p) => p(t));
    }

    /* The table is virtual: only the rows in view (plus a margin) are in
     * the DOM, between two spacer rows, so 1,000+ trials cost no layout.
     * Column widths come from the longest text of each column over all rows
     * (table-layout: fixed), so they do not jump while scrolling. */
    const ROW_H = 31, MARGIN = 15;
    const TV = { rows: [], cols: [], start: -1, end: -1, widths: '' };
    const cellText = (c, t) => { const v = c.get(t); return c.fmt ? c.fmt(v) : HF.fmtVal(v); };

    function renderWindow(force) {
      const wrap = table.parentElement;
      const n = TV.rows.length;
      // The box may still be short (rendered while empty): size the window
      // for the height it can grow to, not the height it has now.
      const viewH = Math.max(wrap.clientHeight, parseFloat(getComputedStyle(wrap).maxHeight) || window.innerHeight);
      const first = Math.max(0, Math.floor(wrap.scrollTop / ROW_H) - MARGIN);
      const last = Math.min(n, Math.ceil((wrap.scrollTop + viewH) / ROW_H) + MARGIN);
      if (!force && first === TV.start && last === TV.end) return;
      TV.start = first; TV.end = last;
      const cols = TV.cols;
      const bestId = S.exp && S.exp.best ? S.exp.best.trial_id : null;
      let html = first > 0 ? `<tr class="spacer" style="height:${first * ROW_H}px"></tr>` : '';
      for (let k = first; k < last; k++) {
        const t = TV.rows[k];
        const cls = (t.id === bestId ? 'best ' : '') + (t.id === S.hover ? 'hl' : '');
        html += `<tr data-id="${t.id}"${cls ? ` class="${cls.trim()}"` : ''}>`;
        for (const c of cols) {
          const v = c.get(t);
          let cell;
          if (c.key === 'id') cell = `<a href="#/trials/${t.id}">${t.id}</a>`;
          else if (c.key === 'state') cell = `<span class="badge ${HF.esc(t.state)}">${HF.esc(t.state)}</span>`;
          else if (c.key === 'agent' && t.agent_id != null) cell = `<a href="#/agents">${HF.esc(cellText(c, t))}</a>`;
          else cell = HF.esc(cellText(c, t));
          html += `<td${c.num && typeof v === 'number' ? ' class="num"' : ''}>${cell}</td>`;
        }
        html += '</tr>';
      }
      if (last < n) html += `<tr class="spacer" style="height:${(n - last) * ROW_H}px"></tr>`;
      tableBody.innerHTML = html || `<tr><td colspan="${cols.length}" class="empty">${S.trials.size ? 'no trial matches' : 'no trials yet'}</td></tr>`;
    }
    /* Text widths measured on a canvas with the table's own fonts. */
    const measure = document.createElement('canvas').getContext('2d');
    const fonts = {};
    function textWidth(text, kind) {
      if (!fonts.td) {
        const fam = getComputedStyle(table).fontFamily;
        fonts.td = `13px ${fam}`; fonts.th = `600 12px ${fam}`; fonts.badge = `600 11px ${fam}`;
      }
      measure.font = fonts[kind];
      return measure.measureText(text).width + (kind === 'badge' ? text.length * 0.3 : 0);
    }
    /* Columns cut off on the right: fade the edge and say "scroll". */
    function markOverflow() {
      const wrap = table.parentElement;
      wrap.parentElement.classList.toggle('more-right', wrap.scrollLeft + wrap.clientWidth < wrap.scrollWidth - 2);
    }
    const wrapRO = new ResizeObserver(() => { if (TV.cols.length) { renderWindow(false); markOverflow(); } });
    wrapRO.observe(table.parentElement);
    let scrollRaf = 0;
    table.parentElement.addEventListener('scroll', () => {
      cancelAnimationFrame(scrollRaf);
      scrollRaf = requestAnimationFrame(() => { renderWindow(false); markOverflow(); });
    });

    const renderTable = HF.throttle(() => {
      if (S.closed) return;
      const cols = columns();
      const col = cols.find((c) => c.key === S.sort.key) || cols[0];
      const pass = makeFilter(cols);
      const rows = [...S.trials.values()].filter((t) => isSel(t.id) && (!S.stateFilter || t.state === S.stateFilter) && pass(t));
      const keyed = rows.map((t) => [col.get(t), t]);
      keyed.sort((a, b) => {
        const d = HF.cmp(a[0], b[0]);
        return d === 0 ? a[1].id - b[1].id : (a[0] == null || a[0] === '' || b[0] == null || b[0] === '' ? d : d * S.sort.dir);
      });
      TV.rows = keyed.map((x) => x[1]);
      TV.cols = cols;
      // Column widths in px from the measured width of the longest text
      // (sampled for speed); the header leaves room for the sort arrow.
      const step = Math.max(1, Math.floor(TV.rows.length / 400));
      const widths = cols.map((c) => {
        let w = textWidth(c.label, 'th') + 14;
        for (let k = 0; k < TV.rows.length; k += step) {
          const len = c.key === 'state' ? textWidth(String(TV.rows[k].state).toUpperCase(), 'badge') + 16
            : textWidth(cellText(c, TV.rows[k]), 'td');
          if (len > w) w = len;
        }
        return Math.min(320, Math.ceil(w) + 16 + 4);   // + cell padding + slack
      });
      const wkey = widths.join(',') + '|' + cols.map((c) => c.key).join(',') + '|' + S.sort.key + S.sort.dir;
      if (wkey !== TV.widths) {
        TV.widths = wkey;
        table.style.width = widths.reduce((a, b) => a + b, 0) + 'px';
        table.style.minWidth = '100%';
        tableHead.innerHTML = '<tr>' + cols.map((c, i) => `<th class="sortable${c.num ? ' num' : ''}" data-key="${HF.esc(c.key)}" style="width:${widths[i]}px">${HF.esc(c.label)}` +
          (c.key === S.sort.key ? `<span class="arrow">${S.sort.dir > 0 ? '▲' : '▼'}</span>` : '') + '</th>').join('') + '</tr>';
      }
      renderWindow(true);
      markOverflow();
      tableNote.textContent = `${TV.rows.length} of ${S.trials.size} trials`;
      table.dataset.rows = String(TV.rows.length);
    }, () => (S.trials.size > 300 ? 1000 : 300));

    tableHead.addEventListener('click', (ev) => {
      const th = ev.target.closest('th[data-key]');
      if (!th) return;
      const k = th.dataset.key;
      S.sort = S.sort.key === k ? { key: k, dir: -S.sort.dir } : { key: k, dir: 1 };
      renderTable(); renderTable.flush();
    });
    filterIn.addEventListener('input', () => { S.filter = filterIn.value; renderTable(); });
    stateSel.addEventListener('change', () => { S.stateFilter = stateSel.value; renderTable(); renderTable.flush(); });
    tableBody.addEventListener('mouseover', (ev) => {
      const tr = ev.target.closest('tr[data-id]');
      const tid = tr ? +tr.dataset.id : null;
      if (tid === S.rowHover) return;
      S.rowHover = tid;
      if (tid != null && S.curves.has(tid)) { S.curveHover = tid; drawCurves(); }
    });
    tableBody.addEventListener('mouseleave', () => {
      S.rowHover = null;
      if (S.curveHover != null) { S.curveHover = null; drawCurves(); }
    });

    // ---------- data flow ----------
    function renderAll() {
      renderHead(); renderMetricSelect(); renderBest(); renderTable(); renderParallel(); renderScatter(); renderRungs();
    }
    const renderSlow = HF.throttle(async () => {
      renderMetricSelect();
      if (S.exp && S.exp.searcher_state) {   // rung counts are not in the live summaries
        try { const e = await HF.api.get('/api/v1/experiments/' + id); if (!S.closed) { S.exp = Object.assign(S.exp, e); } } catch (err) { /* keep */ }
      }
      renderRungs();
    }, 3000);

    async function load() {
      try {
        const [e, tr] = await Promise.all([HF.api.get('/api/v1/experiments/' + id), HF.api.get(`/api/v1/experiments/${id}/trials`)]);
        if (S.closed) return;
        S.exp = e;
        S.trials.clear();
        for (const t of tr.trials || []) S.trials.set(t.id, t);
        if (!S.metric) S.metric = objMetric();
        renderAll();
        root.dataset.loaded = '1';
        await loadCurves(false);
      } catch (e) {
        if (e.status === 404) root.replaceChildren(h('div.empty', `Experiment ${id} does not exist. `, h('a', { href: '#/experiments' }, 'All experiments')));
        else HF.toast('loading experiment failed: ' + e.message, true);
      }
    }

    offs.push(HF.live.on('experiment', (e) => {
      if (!e || e.id !== id) return;
      S.exp = Object.assign(S.exp || {}, e);
      renderHead(); renderTable();
    }));
    offs.push(HF.live.on('trial', (t) => {
      if (!t || t.experiment_id !== id) return;
      const old = S.trials.get(t.id);
      S.trials.set(t.id, Object.assign(old || {}, t));
      renderTable(); renderBest(); renderParallel(); renderScatter(); renderSlow();
    }));
    offs.push(HF.live.on('metric', (m) => {
      if (!m || m.experiment_id !== id || !m.values) return;
      const t = S.trials.get(m.trial_id);
      if (t) {
        t.latest = Object.assign({}, t.latest, m.values, m.step != null ? { step: m.step } : {});
        // Trial summaries arrive on state changes only: keep the objective
        // and its best value current from the metric stream.
        const ov = m.values[objMetric()];
        if (typeof ov === 'number' && better(ov, t.objective)) {
          t.objective = ov;
          t.best = Object.assign({}, t.best, { [objMetric()]: ov });
          renderBest(); renderParallel(); renderScatter();
        }
        renderTable();
      }
      const v = m.values[S.metric];
      if (typeof v === 'number' && S.metric) {
        const c = curveOf(m.trial_id);
        const x = m.step != null ? m.step : (m.values.epoch != null ? m.values.epoch : c.pts.length);
        const last = c.pts[c.pts.length - 1];
        if (!last || x > last[0]) { c.pts.push([x, v]); capCurve(c); renderCurves(); }
      }
    }));
    // After a reconnect, catch up on whatever the stream missed.
    offs.push(HF.live.on('open', () => { if (root.dataset.loaded) { reloadSoon(); } }));
    const reloadSoon = HF.throttle(async () => {
      try {
        const [e, tr] = await Promise.all([HF.api.get('/api/v1/experiments/' + id), HF.api.get(`/api/v1/experiments/${id}/trials`)]);
        if (S.closed) return;
        S.exp = e;
        for (const t of tr.trials || []) S.trials.set(t.id, t);
        renderAll();
        loadCurves(true);
      } catch (err) { /* next reconnect retries */ }
    }, 3000);
    const tick = setInterval(() => { renderHead(); }, 5000);

    load();

    return () => {
      S.closed = true;
      offs.forEach((f) => f());
      clearInterval(tick);
      wrapRO.disconnect();
      [renderBest, renderCurves, renderParallel, renderScatter, renderTable, renderSlow, reloadSoon].forEach((f) => f.cancel());
      charts.forEach((c) => c.destroy());
      scatters.forEach((s) => s.chart.destroy());
    };
  };
})(window.HF);
