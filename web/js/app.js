/* app.js — hash router and start-up. Routes:
 *   #/experiments        list + submit        (page_experiments.js, submit_panel.js)
 *   #/experiments/{id}   one experiment       (page_experiment.js)
 *   #/trials/{id}        one trial            (page_trial.js)
 *   #/compare/{id},{id}… trials side by side (page_compare.js)
 *   #/agents             agents               (page_agents.js)
 * A page is a function (root, params) -> unmount(); the router calls the
 * previous page's unmount before mounting the next, so live handlers,
 * timers and charts never outlive their page. */
'use strict';
(function (HF) {
  const ROUTES = [
    [/^#\/experiments\/(\d+)\/?$/, 'experiment', (m) => ({ id: m[1] }), 'experiments'],
    [/^#\/trials\/(\d+)\/?$/, 'trial', (m) => ({ id: m[1] }), 'experiments'],
    [/^#\/compare\/(\d+(?:,\d+)*)\/?$/, 'compare', (m) => ({ ids: m[1].split(',').map(Number) }), 'experiments'],
    [/^#\/agents\/?$/, 'agents', () => ({}), 'agents'],
    [/^#?\/?(experiments)?\/?$/, 'experiments', () => ({}), 'experiments'],
  ];
  let unmount = null;

  function route() {
    const hash = location.hash || '#/experiments';
    let hit = null;
    for (const [re, page, params, nav] of ROUTES) {
      const m = re.exec(hash);
      if (m) { hit = { page, params: params(m), nav }; break; }
    }
    if (unmount) { try { unmount(); } catch (e) { console.error(e); } unmount = null; }
    const main = document.getElementById('main');
    const root = HF.h('div.page');
    main.replaceChildren(root);
    document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', !!hit && a.dataset.nav === hit.nav));
    document.title = 'hyperfarm';
    if (!hit) {
      root.append(HF.h('div.empty', 'No such page. ', HF.h('a', { href: '#/experiments' }, 'Experiments')));
      return;
    }
    root.dataset.page = hit.page;
    unmount = HF.pages[hit.page](root, hit.params) || null;
    window.scrollTo(0, 0);
  }

  window.addEventListener('hashchange', route);
  document.getElementById('logout').addEventListener('click', () => {
    HF.api.setToken('');
    HF.live.restart();
    HF.api.whoami().finally(route);
  });
  document.getElementById('logout').hidden = !HF.api.token();
  HF.live.restart();
  // the page knows who it is, and whether this scheduler takes writes,
  // before drawing buttons (replication.js)
  HF.api.whoami().then(() => HF.repl.load()).finally(() => { route(); HF.repl.start(); });
})(window.HF);
