/* exp_head.js — the experiment page's header: breadcrumbs, name, state
 * badge, Pause / Resume / Cancel, and the stats row (best objective and
 * trial, searcher, counts, checkpoint storage, start, duration). Redrawn on `all` and `exp`, and
 * every 5 s so "running for" ticks.
 */
'use strict';
(function (HF) {
  const h = HF.h;

  /* Appends the header to root (the page); returns the destroy function. */
  HF.exp.panels.head = function (store, root) {
    const id = store.id;
    const crumb = h('span#exp-crumb', '#' + id);
    const title = h('h1#exp-title', 'Experiment ' + id);
    const badge = h('span');
    const reason = h('span.end-reason#exp-end-reason');   /* why it ended (docs/scheduler.md "End states") */
    const actions = h('span');
    const stats = h('div.stats#exp-stats');
    root.append(
      h('div.crumbs', h('a', { href: '#/experiments' }, 'Experiments'), ' / ', crumb),
      h('div.page-head', title, badge, reason, h('div.spacer'), actions),
      h('section.panel', stats));

    function render() {
      const e = store.exp;
      if (!e) return;
      title.textContent = e.name || ('Experiment ' + id);
      crumb.textContent = `#${id} ${e.name || ''}`;
      badge.replaceChildren(HF.badge(e.state));
      const why = e.end_reason && e.end_reason !== 'search finished' ? e.end_reason : '';
      reason.textContent = why;
      reason.title = why;
      reason.hidden = !why;
      actions.replaceChildren(HF.experimentActions(e, (r) => store.mergeExp(r)));
      document.title = (e.name || 'experiment') + ' · hyperfarm';
      // The counts of the trials the page holds (the table's), so the
      // header never lags the live trial events; the summary's before then.
      let c = e.counts || {};
      if (store.trials.size) {
        c = {};
        for (const t of store.trials.values()) { const k = String(t.state).toLowerCase(); c[k] = (c[k] || 0) + 1; }
      }
      const stat = (v, l, extra) => h('div.stat', extra || {}, h('div.v', v), h('div.l', l));
      const obj = e.objective || {};
      stats.replaceChildren(
        stat(e.best && e.best.value != null ? HF.fmtNum(e.best.value) : '–', `best ${obj.metric || ''} (${obj.goal || ''})`, { id: 'best-stat' }),
        stat(e.best && e.best.trial_id != null ? h('a', { href: '#/trials/' + e.best.trial_id }, '#' + e.best.trial_id) : '–', 'best trial'),
        ...(HF.objectives(e).length > 1 ? [stat(HF.objectivesText(e), `objectives (${HF.objectives(e).length}; best is of the first)`, { id: 'objectives-stat' })] : []),
        stat(e.searcher || '', 'searcher'),
        stat(`${(c.completed || 0) + (c.stopped || 0)}`, 'done'),
        stat(`${(c.running || 0) + (c.assigned || 0)}`, 'running', { id: 'running-stat' }),
        stat(`${c.queued || 0}`, 'queued'),
        stat(`${c.failed || 0}`, 'failed'),
        stat(e.max_trials != null ? String(e.max_trials) : '–', 'max trials'),
        stat(HF.fmtBytes(e.checkpoint_bytes || 0), 'checkpoints', { id: 'storage-stat', title: 'checkpoint storage: the stored objects its trials name' }),
        stat(HF.fmtTime(e.created_at), 'started'),
        stat(HF.fmtDur((e.ended_at || Date.now()) - e.created_at), e.ended_at ? 'took' : 'running for'));
    }

    store.on('all', render);
    store.on('exp', render);
    store.on('trial', render);
    const tick = setInterval(render, 5000);
    return () => clearInterval(tick);
  };
})(window.HF);
