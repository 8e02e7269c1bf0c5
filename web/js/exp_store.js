/* exp_store.js — the data behind #/experiments/{id}, shared by its panels.
 *
 * One store per mounted experiment page: the experiment summary, its trials
 * (Map id -> summary), every trial's learning curve for the chosen metric
 * (Map id -> {pts: [[x, value]...], loaded}), and the view state more than one
 * panel follows (the chosen metric, the brushed selection, the hovered
 * curve). It loads over REST, keeps itself current from the live stream
 * (HF.live: `experiment`, `trial`, `metric`, `open` events) and tells the
 * panels what changed through topics; it never touches the DOM.
 *
 * Topics (store.on(topic, fn) returns the off function):
 *   all            load, or reload after a reconnect: everything may differ
 *   exp            the experiment summary changed (live event, an action)
 *   trial          a trial summary changed (live event)
 *   objective      a running trial's objective improved (metric stream)
 *   latest         a trial's latest values changed (metric stream)
 *   names          metric names may have grown (throttled after `trial`)
 *   searcher       rung counts refetched (throttled after `trial`)
 *   metric         the chosen metric changed
 *   points         curve points arrived (fetch or metric stream)
 *   curves-loading / curves-loaded (info)   a curve fetch started / ended
 *   selection      the brushed set of trials changed (null = all)
 *   hover (source) the hovered curve changed ('curves' or 'table')
 * Handlers run synchronously in subscription order; panels throttle their
 * own redraws. After close() nothing is emitted.
 *
 * Scale: built for 1,000 trials and 1,000,000 metric points. Every trial's
 * curve comes in one request (GET /experiments/{id}/metrics?name=&max_points=)
 * that the server downsamples per trial (the total stays near POINT_BUDGET
 * whatever the trial count); afterwards live `metric` events append, and a
 * reconnect fetches only the rows after the last seq seen (&after=).
 */
'use strict';
(function (HF) {
  const POINT_BUDGET = 150000;
  const PAR_CAT_CH = 14;   // characters before a category label is truncated

  const exp = HF.exp = HF.exp || {};
  exp.panels = exp.panels || {};

  /* A category value as an axis label: truncated past PAR_CAT_CH characters
   * (the parallel coordinates and the scatter axes share it). */
  exp.catLabel = (v) => (v.length > PAR_CAT_CH ? v.slice(0, PAR_CAT_CH - 1) + '…' : v);

  /* Value of trial t on dimension d of store.dims(): the objective, or the
   * hyperparameter (as a string on category axes). */
  exp.dimVal = (d, t) => {
    if (d.objective) return t.objective;
    const v = (t.hparams || {})[d.key];
    if (d.type === 'category') return v == null ? 'null' : (typeof v === 'object' ? JSON.stringify(v) : String(v));
    return v;
  };

  /* Adds to st the values derived from its experiment and trials. */
  function addDerived(st) {
    st.goal = () => (st.exp && st.exp.objective && st.exp.objective.goal === 'minimize' ? -1 : 1);
    st.objMetric = () => (st.exp && st.exp.objective && st.exp.objective.metric) || 'objective';
    st.better = (a, b) => (b == null || (a != null && st.goal() * (a - b) > 0));
    st.isSel = (tid) => !st.selection || st.selection.has(tid);
    st.specOf = (k) => ((st.exp && st.exp.config && st.exp.config.hyperparameters) || {})[k] || {};

    st.hparamKeys = function () {
      const cfg = st.exp && st.exp.config && st.exp.config.hyperparameters;
      const keys = new Set();
      if (cfg && typeof cfg === 'object') for (const k of Object.keys(cfg)) keys.add(k);
      for (const t of st.trials.values()) for (const k of Object.keys(t.hparams || {})) keys.add(k);
      return [...keys];
    };
    /* Hyperparameters that are searched (spec objects) or vary across trials. */
    st.searchedKeys = function () {
      const cfg = (st.exp && st.exp.config && st.exp.config.hyperparameters) || {};
      return st.hparamKeys().filter((k) => {
        if (cfg[k] && typeof cfg[k] === 'object' && !Array.isArray(cfg[k])) return true;
        const vals = new Set();
        for (const t of st.trials.values()) { vals.add(JSON.stringify((t.hparams || {})[k])); if (vals.size > 1) return true; }
        return false;
      });
    };
    st.metricNames = function () {
      const names = new Set();
      for (const t of st.trials.values()) { HF.metricNames(t.latest).forEach((n) => names.add(n)); HF.metricNames(t.best).forEach((n) => names.add(n)); }
      names.add(st.objMetric());
      return [...names].sort();
    };
    /* The axes of the parallel coordinates (one per searched hyperparameter,
     * then the objective) over the trials that have an objective. */
    st.dims = function () {
      const trials = [...st.trials.values()].filter((t) => typeof t.objective === 'number');
      const dims = st.searchedKeys().map((k) => {
        const vals = trials.map((t) => (t.hparams || {})[k]);
        const numeric = vals.every((v) => typeof v === 'number');
        const spec = st.specOf(k);
        if (numeric) {
          const log = spec.type === 'log' && vals.every((v) => v > 0);
          return { key: k, type: log ? 'log' : 'value' };
        }
        const cats = [...new Set(vals.map((v) => (v == null ? 'null' : (typeof v === 'object' ? JSON.stringify(v) : String(v)))))].sort();
        return { key: k, type: 'category', cats };
      });
      dims.push({ key: st.objMetric(), type: 'value', objective: true });
      return { dims, trials };
    };
  }

  /* Adds to st its learning curves: st.perTrialPoints(), st.addPoint(tid,
   * m) for a live metric, and st.loadCurves(incremental), which fetches
   * every trial's curve of st.metric (incremental: only the rows after the
   * last seq fetched, after a reconnect; a newer call supersedes it). */
  function addCurves(st) {
    let gen = 0, next = 0;
    st.perTrialPoints = () => Math.max(30, Math.min(2000, Math.floor(POINT_BUDGET / Math.max(1, st.trials.size))));
    function curveOf(tid) {
      let c = st.curves.get(tid);
      if (!c) { c = { pts: [], loaded: false }; st.curves.set(tid, c); }
      return c;
    }
    /* Live points are appended without downsampling; halve a curve that grows
     * past twice its share so memory and draw time stay bounded. */
    function capCurve(c) {
      const cap = 2 * st.perTrialPoints();
      if (c.pts.length <= cap) return;
      const last = c.pts[c.pts.length - 1];
      c.pts = c.pts.filter((_, k) => k % 2 === 0);
      if (c.pts[c.pts.length - 1] !== last) c.pts.push(last);
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
    /* m: a live `metric` event whose values hold st.metric. */
    st.addPoint = (tid, m) => {
      const c = curveOf(tid);
      const x = m.step != null ? m.step : (m.values.epoch != null ? m.values.epoch : c.pts.length);
      const last = c.pts[c.pts.length - 1];
      if (!last || x > last[0]) { c.pts.push([x, m.values[st.metric]]); capCurve(c); st.emit('points'); }
    };
    st.loadCurves = async function (incremental) {
      if (!st.metric) return;
      if (!incremental || !next) { gen++; st.curves.clear(); next = 0; }
      const my = gen;
      const ids = [...st.trials.keys()].sort((a, b) => b - a);
      const t0 = performance.now();
      st.emit('curves-loading', { count: ids.length });
      try {
        const url = `/api/v1/experiments/${st.id}/metrics?name=${encodeURIComponent(st.metric)}` +
          `&max_points=${st.perTrialPoints()}` + (next ? `&after=${next}` : '');
        const r = await HF.api.get(url);
        if (my !== gen || st.closed) return;
        for (const s of r.series || []) addSeries(s.trial_id, s.points);
        for (const tid of ids) curveOf(tid).loaded = true;   // trials without points yet
        if (r.next != null) next = Math.max(next, r.next);
        st.emit('points');
      } catch (e) { if (e.status !== 401) HF.toast('loading curves failed: ' + e.message, true); }
      if (my !== gen || st.closed) return;
      st.emit('curves-loaded', { count: ids.length, ms: Math.round(performance.now() - t0), perTrial: st.perTrialPoints() });
    };
  }

  /* st's handlers of the live stream; returns their off functions. slow:
   * the throttled refresh after a trial change; reload: the catch-up after
   * a reconnect. */
  function subscribeLive(st, slow, reload) {
    const id = st.id;
    return [
      HF.live.on('experiment', (e) => {
        if (!e || e.id !== id) return;
        st.mergeExp(e);
      }),
      HF.live.on('trial', (t) => {
        if (!t || t.experiment_id !== id) return;
        const old = st.trials.get(t.id);
        st.trials.set(t.id, Object.assign(old || {}, t));
        st.emit('trial');
        slow();
      }),
      HF.live.on('metric', (m) => {
        if (!m || m.experiment_id !== id || !m.values) return;
        const t = st.trials.get(m.trial_id);
        if (t) {
          t.latest = Object.assign({}, t.latest, m.values, m.step != null ? { step: m.step } : {});
          // Trial summaries arrive on state changes only: keep the objective
          // and its best value current from the metric stream.
          const ov = m.values[st.objMetric()];
          if (typeof ov === 'number' && st.better(ov, t.objective)) {
            t.objective = ov;
            t.best = Object.assign({}, t.best, { [st.objMetric()]: ov });
            st.emit('objective');
          }
          st.emit('latest');
        }
        if (typeof m.values[st.metric] === 'number' && st.metric) st.addPoint(m.trial_id, m);
      }),
      HF.live.on('open', () => { if (st.loaded) reload(); }),
    ];
  }

  /* The store of experiment id, subscribed to the live stream until
   * close(); call load() once. */
  exp.store = function (id) {
    const st = {
      id, exp: null, trials: new Map(), curves: new Map(), metric: null,
      selection: null, curveHover: null, loaded: false, closed: false,
    };
    const subs = {};
    st.on = (topic, fn) => {
      (subs[topic] = subs[topic] || []).push(fn);
      return () => { subs[topic] = subs[topic].filter((f) => f !== fn); };
    };
    st.emit = (topic, arg) => {
      if (st.closed) return;
      for (const fn of subs[topic] || []) fn(arg);
    };
    addDerived(st);
    addCurves(st);

    // ---------- view state ----------
    st.setMetric = (m) => { st.metric = m; st.loadCurves(false); st.emit('metric'); };
    /* sel: a Set of trial ids, or null for no brush. Emits only on change. */
    st.setSelection = (sel) => {
      const key = (s) => (s ? [...s].sort((a, b) => a - b).join(',') : '');
      if (key(sel) === key(st.selection)) return;
      st.selection = sel;
      st.emit('selection');
    };
    st.setCurveHover = (tid, source) => {
      if (tid === st.curveHover) return;
      st.curveHover = tid;
      st.emit('hover', source);
    };
    /* r: an experiment summary (live event, an action's answer) merged into
     * the one held. */
    st.mergeExp = (r) => { st.exp = Object.assign(st.exp || {}, r); st.emit('exp'); };

    // ---------- loading ----------
    const fetchAll = () => Promise.all([HF.api.get('/api/v1/experiments/' + id), HF.api.get(`/api/v1/experiments/${id}/trials`)]);
    /* The first load; rejects with the API error (status 404: no such
     * experiment) when the experiment or its trials cannot be read. */
    st.load = async function () {
      const [e, tr] = await fetchAll();
      if (st.closed) return;
      st.exp = e;
      st.trials.clear();
      for (const t of tr.trials || []) st.trials.set(t.id, t);
      if (!st.metric) st.metric = st.objMetric();
      st.loaded = true;
      st.emit('all');
      await st.loadCurves(false);
    };
    // After a reconnect, catch up on whatever the stream missed.
    const reloadSoon = HF.throttle(async () => {
      try {
        const [e, tr] = await fetchAll();
        if (st.closed) return;
        st.exp = e;
        for (const t of tr.trials || []) st.trials.set(t.id, t);
        st.emit('all');
        st.loadCurves(true);
      } catch (err) { /* next reconnect retries */ }
    }, 3000);
    const slow = HF.throttle(async () => {
      st.emit('names');
      if (st.exp && st.exp.searcher_state) {   // rung counts are not in the live summaries
        try { const e = await HF.api.get('/api/v1/experiments/' + id); if (!st.closed) { st.exp = Object.assign(st.exp, e); } } catch (err) { /* keep */ }
      }
      st.emit('searcher');
    }, 3000);
    const offs = subscribeLive(st, slow, reloadSoon);

    st.close = () => {
      st.closed = true;
      offs.forEach((f) => f());
      [slow, reloadSoon].forEach((f) => f.cancel());
    };
    return st;
  };
})(window.HF);
