/* page_experiment.js — #/experiments/{id}: one sweep in detail. Lays out
 * the panels and wires them to one store (exp_store.js):
 *
 *   header, stats                                     exp_head.js
 *   about: submitter, parent, tags, description, Extend, Fork   workflow.js
 *   archive / delete, archived note                   exp_storage.js
 *   best-so-far curve (uPlot)  | every trial's learning curve   exp_best.js | exp_curves.js
 *   parallel coordinates of hyperparameters vs objective, brushable   exp_parallel.js
 *   scatter of objective against each hyperparameter   exp_scatter.js
 *   Pareto front (several objectives)                  exp_pareto.js
 *   ASHA rungs and promotions                          exp_rungs.js
 *   hyperparameter importance (fANOVA bars)            exp_importance.js
 *   the trial table: sortable, filterable, virtual;
 *   ticked rows open the compare view                  exp_table.js, page_compare.js
 *   search every trial's logs                          logsearch.js
 *
 * Each panel appends its DOM to the host it is given, subscribes to the
 * store's topics and returns its destroy function. Test hooks on the page
 * root: data-loaded (the first load drew), data-curves-loaded (a curve fetch
 * ended).
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const P = HF.exp.panels;

  HF.pages = HF.pages || {};
  HF.pages.experiment = function (root, params) {
    const id = +params.id;
    const store = HF.exp.store(id);
    // Charts size themselves at creation: each panel goes into the page
    // (already in the document) before the next is built.
    const destroys = [P.head(store, root), P.workflow(store, root), P.storage(store, root)];
    const pair = h('div.grid2', { style: { marginBottom: '16px' } });
    root.append(pair);
    destroys.push(P.best(store, pair), P.curves(store, pair),
      P.parallel(store, root), P.scatter(store, root), P.pareto(store, root), P.rungs(store, root),
      P.importance(store, root), P.table(store, root), HF.logsearch.panel(root, { expId: id }));

    store.on('all', () => { root.dataset.loaded = '1'; });
    store.on('curves-loaded', () => { root.dataset.curvesLoaded = '1'; });
    store.load().catch((e) => {
      if (e.status === 404) root.replaceChildren(h('div.empty', `Experiment ${id} does not exist. `, h('a', { href: '#/experiments' }, 'All experiments')));
      else HF.toast('loading experiment failed: ' + e.message, true);
    });

    return () => {
      store.close();
      destroys.forEach((f) => f());
    };
  };
})(window.HF);
