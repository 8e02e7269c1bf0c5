/* exp_rungs.js — the "ASHA rungs" panel, shown for ASHA / Hyperband
 * experiments: per rung its budget, results, promotions and running
 * trials, and (with one bracket) which trials reached it, best first,
 * promoted ones in green.
 *
 * GET /experiments/{id} carries searcher_state = {algorithm, mode,
 * reduction_factor, brackets: [{bracket, rungs: [{budget, results,
 * promoted, running}]}]} (counts), plus sampler, model and observations
 * with the TPE sampler (docs/search.md). Which trials sit in a rung is
 * derived from each trial's granted budget: a trial whose budget exceeds a
 * rung's budget was promoted past it. Without searcher_state the rungs are
 * derived from the budgets alone. Redrawn on `all` and `searcher` (the
 * store refetches the counts, throttled, after trial changes).
 */
'use strict';
(function (HF) {
  const h = HF.h;

  /* Links to the trials (with a budget) that reached budget b, best first;
   * those that reached nextB too are marked promoted. At most 40. */
  function chips(store, trials, b, nextB) {
    const ids = trials.filter((t) => t.budget >= b).sort((x, y) => (store.better(x.objective, y.objective) ? -1 : 1));
    const out = ids.slice(0, 40).map((t) => {
      const promoted = nextB != null && t.budget >= nextB;
      return h('a.chip' + (promoted ? '.promoted' : ''), { href: '#/trials/' + t.id, title: promoted ? 'promoted' : (t.state || '') }, '#' + t.id);
    });
    if (ids.length > 40) out.push(h('span.muted', ` +${ids.length - 40} more`));
    return out;
  }

  /* Table rows from the searcher's brackets (chips only with one bracket). */
  function bracketRows(store, trials, brackets) {
    const single = brackets.length <= 1;
    const body = [];
    for (const br of brackets) {
      const rungs = br.rungs || [];
      rungs.forEach((r, k) => {
        const nextB = rungs[k + 1] ? rungs[k + 1].budget : null;
        body.push(h('tr', h('td', brackets.length > 1 ? `${br.bracket}` : ''), h('td', k), h('td.num', HF.fmtVal(r.budget)),
          h('td.num', HF.fmtVal(r.results)), h('td.num', HF.fmtVal(r.promoted)), h('td.num', HF.fmtVal(r.running)),
          h('td', { style: { whiteSpace: 'normal' } }, single ? chips(store, trials, r.budget, nextB) : '')));
      });
    }
    return body;
  }

  /* Table rows derived from the distinct budgets granted to trials. */
  function budgetRows(store, trials) {
    const budgets = [...new Set(trials.map((t) => t.budget))].sort((x, y) => x - y);
    return budgets.map((b, k) => {
      const n = trials.filter((t) => t.budget >= b).length;
      const p = budgets[k + 1] != null ? trials.filter((t) => t.budget >= budgets[k + 1]).length : 0;
      return h('tr', h('td', ''), h('td', k), h('td.num', b), h('td.num', n), h('td.num', p), h('td.num', ''),
        h('td', { style: { whiteSpace: 'normal' } }, chips(store, trials, b, budgets[k + 1])));
    });
  }

  function hintOf(st) {
    if (!st) return 'derived from the trials\' budgets (the scheduler reports no searcher_state)';
    const sampler = st.sampler === 'tpe' ?
      (st.model ? `, new trials from TPE over ${st.observations} rung results` : `, TPE sampler (priors until enough rung results: ${st.observations || 0})`) : '';
    return `${st.mode || ''} mode, reduction factor ${st.reduction_factor != null ? st.reduction_factor : '?'}${sampler}`;
  }

  /* Appends the (hidden until known to be ASHA) panel to host; returns the
   * destroy function. */
  HF.exp.panels.rungs = function (store, host) {
    const panel = h('section.panel#rungs-panel', { hidden: true });
    host.append(panel);

    function render() {
      const e = store.exp;
      if (!e) return;
      const st = e.searcher_state;
      const isAsha = /asha|hyperband/i.test(e.searcher || '') || (st && (st.brackets || st.rungs));
      panel.hidden = !isAsha;
      if (!isAsha) return;
      const trials = [...store.trials.values()].filter((t) => typeof t.budget === 'number');
      let brackets = [];
      if (st && Array.isArray(st.brackets)) brackets = st.brackets;
      else if (st && Array.isArray(st.rungs)) brackets = [{ bracket: 0, rungs: st.rungs }];
      const single = brackets.length <= 1;
      const body = brackets.length ? bracketRows(store, trials, brackets) : budgetRows(store, trials);
      panel.replaceChildren(
        h('div.panel-head', h('h2', 'ASHA rungs'), h('span.hint', hintOf(st))),
        body.length ? h('div.table-wrap', { style: { maxHeight: '420px' } }, h('table.data.rungs#rungs-table',
          h('thead', h('tr', h('th', brackets.length > 1 ? 'bracket' : ''), h('th', 'rung'), h('th.num', 'budget'), h('th.num', 'results'),
            h('th.num', 'promoted'), h('th.num', 'running'), h('th', single ? 'trials that reached it, best first (green = promoted)' : ''))),
          h('tbody', body)))
          : h('div.empty', 'no rung reached yet'));
    }

    store.on('all', render);
    store.on('searcher', render);
    return () => {};
  };
})(window.HF);
