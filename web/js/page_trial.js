/* page_trial.js — #/trials/{id}: one trial.
 *
 * Every metric it reports gets its own uPlot chart (fetched once with
 * max_points so the server downsamples, then extended by live `metric`
 * events); the log tail polls /logs?after=SEQ once a second while the trial
 * runs (follow mode keeps the view at the bottom; scrolling up pauses it);
 * the events of its life, its checkpoints and hyperparameters; a kill button.
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const MAX_POINTS = 1000;      // asked of the server per metric
  const MAX_LOG_LINES = 5000;   // kept in the DOM
  const LOG_PAGE = 2000;

  HF.pages = HF.pages || {};
  HF.pages.trial = function (root, params) {
    const id = +params.id;
    const S = { t: null, series: new Map(), logNext: 0, logLoaded: false, follow: true, closed: false, polling: false, stream: '' };
    const offs = [];

    const title = h('h1#trial-title', 'Trial ' + id);
    const badge = h('span');
    const killBtn = h('button.btn.danger#kill-trial', { disabled: true }, 'Kill trial');
    const crumbs = h('div.crumbs', h('a', { href: '#/experiments' }, 'Experiments'), ' / ');
    const stats = h('div.stats#trial-stats');
    const hpBox = h('dl.kv#trial-hparams');
    const events = h('ul.timeline#trial-events');
    const eventsNote = h('span.hint#trial-events-note');
    const chartsGrid = h('div.grid-charts#metric-charts');
    const chartsEmpty = h('div.empty', 'no metrics reported yet');
    const ckPanel = HF.checkpoints.panel(id);   // exp_storage.js
    const logPre = h('pre.log#trial-log');
    const followChk = h('input#log-follow', { type: 'checkbox', checked: true });
    const streamSel = h('select#log-stream', h('option', { value: '' }, 'stdout + stderr'), h('option', { value: 'stdout' }, 'stdout'), h('option', { value: 'stderr' }, 'stderr'));
    const logNote = h('span.hint#log-note');
    const notes = HF.trialNotes(id);   // workflow.js

    root.append(
      crumbs,
      h('div.page-head', title, badge, h('span.sub#trial-sub'), h('div.spacer'), killBtn),
      h('section.panel', stats),
      h('div.grid2', { style: { marginBottom: '16px' } },
        h('section.panel', h('h2', 'Hyperparameters'), hpBox),
        h('section.panel', h('div.panel-head', h('h2', 'Life of the trial'), eventsNote), events)),
      notes.el,
      h('section.panel', h('div.panel-head', h('h2', 'Metrics'), h('span.hint', `server-downsampled to ≤${MAX_POINTS} points per metric, then live`)), chartsGrid, chartsEmpty),
      h('section.panel', h('div.panel-head', h('h2', 'Log'), logNote, h('div.spacer'), streamSel, h('label', followChk, 'follow')), logPre),
      ckPanel.el);
    const searchDestroy = HF.logsearch.panel(root, { trialId: id });   /* logsearch.js */

    // ---------- header ----------
    function renderHead() {
      const t = S.t;
      if (!t) return;
      badge.replaceChildren(HF.badge(t.state));
      document.title = `trial ${id} · hyperfarm`;
      crumbs.replaceChildren(h('a', { href: '#/experiments' }, 'Experiments'), ' / ',
        h('a', { href: '#/experiments/' + t.experiment_id }, 'experiment #' + t.experiment_id), ' / ', h('span', 'trial #' + id));
      killBtn.disabled = HF.TERMINAL.has(t.state);
      if (S.exp && S.exp.id === t.experiment_id) { HF.guard(killBtn, S.exp); notes.guard(S.exp); }
      else if (t.experiment_id && !S.expWait) {   // the owner is the experiment's: fetch it once
        S.expWait = HF.api.get('/api/v1/experiments/' + t.experiment_id)
          .then((x) => { S.exp = x; renderHead(); }).catch(() => {});
      }
      const stat = (v, l) => h('div.stat', h('div.v', v == null || v === '' ? '–' : v), h('div.l', l));
      stats.replaceChildren(
        stat(t.objective != null ? HF.fmtNum(t.objective) : '–', 'objective'),
        stat(t.agent || (t.agent_id != null ? '#' + t.agent_id : '–'), 'agent'),
        stat(String(t.restarts || 0), 'restarts'),
        stat(t.exit_code != null ? String(t.exit_code) : '–', 'exit code'),
        stat(t.budget != null ? String(t.budget) : '–', 'budget'),
        stat(t.latest && t.latest.step != null ? String(t.latest.step) : '–', 'step'),
        stat(HF.fmtTime(t.created_at), 'queued'),
        stat(HF.fmtTime(t.started_at), 'started'),
        stat(t.ended_at ? HF.fmtTime(t.ended_at) : '–', 'ended'),
        stat(t.started_at ? HF.fmtDur((t.ended_at || Date.now()) - t.started_at) : '–', 'duration'),
        stat(t.seed != null ? String(t.seed) : '–', 'seed'));
      const hp = t.hparams || {};
      hpBox.replaceChildren(...Object.keys(hp).sort().flatMap((k) => [h('dt', k), h('dd.mono', typeof hp[k] === 'object' ? JSON.stringify(hp[k]) : HF.fmtVal(hp[k]))]));
      if (!Object.keys(hp).length) hpBox.replaceChildren(h('dd.muted', 'none'));
      // Oldest first; the box grows up to its max height, then scrolls and
      // stays pinned to the newest event unless the user scrolled up.
      const evs = (t.events || []).slice().sort((a, b) => a.time - b.time);
      const pinned = events.scrollTop + events.clientHeight >= events.scrollHeight - 4;
      events.replaceChildren(...evs.map((e) => h('li', h('span.t', HF.fmtTime(e.time)), HF.badge(e.type), h('span', e.detail || ''),
        e.user ? h('span.muted', ' by ' + e.user) : null)));
      notes.set(t);
      if (!evs.length) events.replaceChildren(h('li.muted', 'no events recorded'));
      if (pinned) events.scrollTop = events.scrollHeight;
      const over = events.scrollHeight > events.clientHeight + 1;
      events.classList.toggle('overflowing', over);
      eventsNote.textContent = evs.length ? `${evs.length} event${evs.length === 1 ? '' : 's'}, newest last` +
        (over ? ' (scroll up for earlier)' : '') : '';
    }

    killBtn.addEventListener('click', async () => {
      if (!confirm(`Kill trial ${id}? The agent stops it (SIGTERM, then SIGKILL after the grace period).`)) return;
      killBtn.disabled = true;
      const r = await HF.api.act(`kill trial ${id}`, () => HF.api.post(`/api/v1/trials/${id}/kill`));
      if (r) { S.t = Object.assign(S.t || {}, r); renderHead(); refresh(); }
      else killBtn.disabled = false;
    });

    // ---------- metric charts ----------
    function seriesOf(name) {
      let s = S.series.get(name);
      if (s) return s;
      const el = h('div.chart.small');
      const box = h('div.chart-box', { 'data-metric': name }, h('h3', name), el);
      // Keep charts in name order.
      const after = [...chartsGrid.children].find((c) => c.dataset.metric > name);
      chartsGrid.insertBefore(box, after || null);
      chartsEmpty.hidden = true;
      const idx = [...S.series.keys(), name].sort().indexOf(name);
      const chart = HF.charts.uplot(el, HF.charts.metricOpts(name, HF.color(idx)), [[], []]);
      s = { name, xs: [], ys: [], chart, box };
      S.series.set(name, s);
      return s;
    }
    const draw = HF.throttle(() => {
      if (S.closed) return;
      let n = 0;
      for (const s of S.series.values()) { s.chart.setData([s.xs, s.ys]); n += s.xs.length; }
      chartsGrid.dataset.points = String(n);
    }, 500);

    function pushPoint(s, x, y) {
      const last = s.xs.length ? s.xs[s.xs.length - 1] : null;
      if (last != null && x <= last) {
        if (x === last) s.ys[s.ys.length - 1] = y;   // same step reported again
        return;
      }
      s.xs.push(x); s.ys.push(y);
      if (s.xs.length > 4 * MAX_POINTS) {   // halve, keep the last point
        const keep = (_, k) => k % 2 === 0 || k === s.xs.length - 1;
        s.xs = s.xs.filter(keep); s.ys = s.ys.filter(keep);
      }
    }

    async function loadMetric(name) {
      const s = seriesOf(name);
      const r = await HF.api.get(`/api/v1/trials/${id}/metrics?name=${encodeURIComponent(name)}&max_points=${MAX_POINTS}`);
      if (S.closed) return;
      const rows = (r.metrics || []).filter((m) => (m.name === undefined || m.name === name) && typeof m.value === 'number');
      const xs = [], ys = [];
      for (const m of rows) {
        const x = m.step != null ? m.step : (m.epoch != null ? m.epoch : m.seq);
        if (xs.length && x <= xs[xs.length - 1]) continue;
        xs.push(x); ys.push(m.value);
      }
      // Live points that came in during the fetch and lie beyond it stay.
      const lastX = xs.length ? xs[xs.length - 1] : -Infinity;
      s.xs.forEach((x, k) => { if (x > lastX) { xs.push(x); ys.push(s.ys[k]); } });
      s.xs = xs; s.ys = ys;
      draw();
    }

    async function loadMetrics() {
      const names = new Set([...HF.metricNames(S.t.latest), ...HF.metricNames(S.t.best)]);
      if (!names.size) {
        // Nothing summarised yet: discover names from the first rows.
        try {
          const r = await HF.api.get(`/api/v1/trials/${id}/metrics?limit=500`);
          for (const m of r.metrics || []) if (m.name && !HF.AXIS_KEYS.has(m.name)) names.add(m.name);
        } catch (e) { /* shown by the charts staying empty */ }
      }
      await HF.pool([...names].sort(), 4, loadMetric, () => S.closed);
      root.dataset.metricsLoaded = '1';
    }

    // ---------- log tail ----------
    const OWN_STAMP = /^\W{0,2}(\d{4}-\d\d-\d\d[T ])?\d\d:\d\d:\d\d/;
    function appendLogs(lines) {
      if (!lines.length) return;
      const frag = document.createDocumentFragment();
      for (const l of lines) {
        // A line that starts with its own timestamp (a logging module's)
        // gets none of ours (the time it arrived is its tooltip); stderr is
        // marked by a thin amber bar before the text, not by colour.
        const err = l.stream === 'stderr';
        const own = OWN_STAMP.test(l.line || '');
        const span = h('span.' + (err ? 'stderr' : 'stdout'),
          { 'data-stream': l.stream || 'stdout', title: `${err ? 'stderr' : 'stdout'}, ${HF.fmtClock(l.time)}` },
          own ? null : h('span.ts', HF.fmtClock(l.time)), h('span.stream-mark'), l.line, '\n');
        if (S.stream && (l.stream || 'stdout') !== S.stream) span.hidden = true;
        frag.appendChild(span);
      }
      logPre.appendChild(frag);
      let extra = logPre.childElementCount - MAX_LOG_LINES;
      while (extra-- > 0) logPre.firstElementChild.remove();
      logNote.textContent = `${logPre.childElementCount.toLocaleString()} lines shown (last ${MAX_LOG_LINES} kept)`;
      if (S.follow) logPre.scrollTop = logPre.scrollHeight;
    }

    async function pollLogs() {
      if (S.polling || S.closed) return;
      S.polling = true;
      try {
        for (let page = 0; page < 50; page++) {
          const r = await HF.api.get(`/api/v1/trials/${id}/logs?after=${S.logNext}&limit=${LOG_PAGE}`);
          if (S.closed) return;
          const logs = r.logs || [];
          appendLogs(logs);
          if (r.next != null) S.logNext = Math.max(S.logNext, r.next);
          else if (logs.length) S.logNext = Math.max(S.logNext, logs[logs.length - 1].seq);
          if (logs.length < LOG_PAGE) break;
        }
        S.logLoaded = true;
        root.dataset.logLoaded = '1';
        if (!logPre.childElementCount) logNote.textContent = 'no output yet';
      } catch (e) {
        if (e.status !== 401) logNote.textContent = 'log unavailable: ' + e.message;
      } finally { S.polling = false; }
    }

    followChk.addEventListener('change', () => { S.follow = followChk.checked; if (S.follow) logPre.scrollTop = logPre.scrollHeight; });
    logPre.addEventListener('scroll', () => {
      const atBottom = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 24;
      if (S.follow !== atBottom) { S.follow = atBottom; followChk.checked = atBottom; }
    });
    streamSel.addEventListener('change', () => {
      S.stream = streamSel.value;
      for (const sp of logPre.children) sp.hidden = !!S.stream && sp.dataset.stream !== S.stream;
      if (S.follow) logPre.scrollTop = logPre.scrollHeight;
    });

    // ---------- data flow ----------
    async function refresh() {
      try {
        const t = await HF.api.get('/api/v1/trials/' + id);
        if (S.closed) return;
        S.t = t; renderHead();
      } catch (e) { /* keep what is shown */ }
      ckPanel.refresh(S.t);
    }
    const refreshSoon = HF.throttle(refresh, 1000);

    async function load() {
      try {
        S.t = await HF.api.get('/api/v1/trials/' + id);
      } catch (e) {
        if (e.status === 404) root.replaceChildren(h('div.empty', `Trial ${id} does not exist. `, h('a', { href: '#/experiments' }, 'All experiments')));
        else HF.toast('loading trial failed: ' + e.message, true);
        return;
      }
      if (S.closed) return;
      renderHead();
      ckPanel.refresh(S.t);
      root.dataset.loaded = '1';
      await Promise.all([loadMetrics(), pollLogs()]);
    }

    offs.push(HF.live.on('trial', (t) => {
      if (!t || t.id !== id) return;
      S.t = Object.assign(S.t || {}, t);
      renderHead();
      refreshSoon();   // events and checkpoints are not in the summary
    }));
    offs.push(HF.live.on('metric', (m) => {
      if (!m || m.trial_id !== id || !m.values) return;
      let stepX = m.step;
      for (const [k, v] of Object.entries(m.values)) {
        if (typeof v !== 'number' || HF.AXIS_KEYS.has(k)) continue;
        const s = seriesOf(k);
        pushPoint(s, stepX != null ? stepX : (m.values.epoch != null ? m.values.epoch : s.xs.length), v);
      }
      if (S.t) {
        S.t.latest = Object.assign({}, S.t.latest, m.values, stepX != null ? { step: stepX } : {});
        if ('checkpoint' in m) refreshSoon();
      }
      draw();
    }));
    offs.push(HF.live.on('open', () => { if (S.t) { refresh(); } }));

    const poll = setInterval(() => {
      if (!S.t || !S.logLoaded) return;
      if (!HF.TERMINAL.has(S.t.state) || S.follow) pollLogs();
    }, 1000);
    const tick = setInterval(() => { if (S.t && !HF.TERMINAL.has(S.t.state)) renderHead(); }, 5000);

    load();

    return () => {
      S.closed = true;
      searchDestroy();
      offs.forEach((f) => f());
      clearInterval(poll); clearInterval(tick);
      draw.cancel(); refreshSoon.cancel(); ckPanel.destroy();
      for (const s of S.series.values()) s.chart.destroy();
    };
  };
})(window.HF);
