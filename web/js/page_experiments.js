/* page_experiments.js — #/experiments: every experiment with its state,
 * searcher, progress, best objective, start time, duration and storage; a
 * tag filter and "show archived"; pause/resume/cancel (HF.experimentActions,
 * also on an experiment's own page). The list follows the live event
 * stream. The submit panel above it is submit_panel.js. */
'use strict';
(function (HF) {
  const h = HF.h;

  function progressCell(exp) {
    const c = exp.counts || {};
    const done = (c.completed || 0) + (c.stopped || 0);
    const running = (c.running || 0) + (c.assigned || 0);
    const queued = c.queued || 0;
    const failed = (c.failed || 0) + (c.canceled || 0);
    const total = Math.max(exp.max_trials || 0, done + running + queued + failed, 1);
    const pct = (v) => (100 * v / total).toFixed(2) + '%';
    return h('td.progress-cell',
      h('div.progress', { title: `${done} done, ${running} running, ${queued} queued, ${failed} failed/canceled` },
        h('span.done', { style: { width: pct(done) } }), h('span.running', { style: { width: pct(running) } }),
        h('span.queued', { style: { width: pct(queued) } }), h('span.failed', { style: { width: pct(failed) } })),
      // "6/16 done · 2 running": counts that are 0 are left out (all are in the tooltip).
      h('div.progress-text', [`${done}${exp.max_trials ? '/' + exp.max_trials : ''} done`, running && `${running} running`,
        queued && `${queued} queued`, failed && `${failed} failed`].filter(Boolean).join(' · ')));
  }

  /* Pause/resume/cancel buttons for one experiment; `after` gets the new summary. */
  HF.experimentActions = function (exp, after) {
    const act = (verb) => async (ev) => {
      ev.stopPropagation();
      if (verb === 'cancel' && !confirm(`Cancel experiment ${exp.id} (${exp.name})? Running trials are killed.`)) return;
      ev.target.disabled = true;
      const r = await HF.api.act(`${verb} experiment ${exp.id}`, () => HF.api.post(`/api/v1/experiments/${exp.id}/${verb}`));
      ev.target.disabled = false;
      if (r && after) after(r);
    };
    const s = exp.state;
    return h('span.row.actions',
      HF.guard(s === 'PAUSED'
        ? h('button.btn.small', { onclick: act('resume'), 'data-action': 'resume' }, 'Resume')
        : h('button.btn.small', { onclick: act('pause'), 'data-action': 'pause', disabled: s !== 'ACTIVE' }, 'Pause'), exp),
      HF.guard(h('button.btn.small.danger', { onclick: act('cancel'), 'data-action': 'cancel', disabled: s !== 'ACTIVE' && s !== 'PAUSED' }, 'Cancel'), exp));
  };

  HF.bestText = function (exp) {
    if (!exp.best || exp.best.value == null) return '–';
    // Several objectives: the best of the first, named (the front is on the page).
    return HF.fmtNum(exp.best.value) + (HF.objectives(exp).length > 1 ? ' ' + exp.objective.metric : '');
  };

  HF.pages = HF.pages || {};
  HF.pages.experiments = function (root) {
    const exps = new Map();
    let closed = false;
    const offs = [];

    const tbody = h('tbody');
    const table = h('table.data#experiments-table',
      h('thead', h('tr', ['ID', 'Name', 'State', 'Searcher', 'Progress', 'Best', 'Objective', 'Started', 'Duration', 'Checkpoints', ''].map((t) => h(t === 'Best' || t === 'Duration' || t === 'ID' || t === 'Checkpoints' ? 'th.num' : 'th', t)))),
      tbody);
    const emptyNote = h('div.empty', 'No experiments yet. Submit one with “New experiment”.');

    const submit = HF.submitPanel(() => load());

    // Tag filter (GET /experiments?tag=); clicking a tag chip sets it.
    let tagFilter = '';
    const tagSel = h('input#tag-filter', { type: 'search', placeholder: 'filter by tag', size: 14 });
    tagSel.addEventListener('change', () => { tagFilter = tagSel.value.trim(); load(); });
    const setTag = (t) => { tagSel.value = t; tagFilter = t; load(); };
    // "show archived": GET /experiments?archived=1 (kept while the tab lives).
    const archChk = h('input#show-archived', { type: 'checkbox', checked: !!HF.showArchived });
    archChk.addEventListener('change', () => { HF.showArchived = archChk.checked; load(); });

    root.append(
      h('div.page-head', h('h1', 'Experiments'), h('span.sub#exp-count'), h('div.spacer'), tagSel,
        h('label.toggle', archChk, 'show archived'),
        HF.guard(h('button.btn.primary#new-exp', { onclick: () => submit.toggleNew() }, 'New experiment'))),
      submit.el,
      h('section.panel', h('div.table-wrap', { style: { maxHeight: 'none', border: 0 } }, table, emptyNote)));

    function row(exp) {
      const dur = exp.created_at ? (exp.ended_at || Date.now()) - exp.created_at : null;
      return h('tr', { 'data-id': exp.id },
        h('td.num', h('a', { href: '#/experiments/' + exp.id }, exp.id)),
        h('td', h('a', { href: '#/experiments/' + exp.id }, exp.name || '(unnamed)'),
          exp.tags && exp.tags.length ? h('div.tags-cell', HF.tagChips(exp.tags, setTag)) : null),
        h('td', HF.badge(exp.state), exp.archived ? [' ', HF.badge('ARCHIVED')] : null),
        h('td', exp.searcher || ''),
        progressCell(exp),
        h('td.num', exp.best && exp.best.trial_id != null
          ? h('a', { href: '#/trials/' + exp.best.trial_id, title: 'trial ' + exp.best.trial_id }, HF.bestText(exp))
          : HF.bestText(exp)),
        h('td.muted.objectives', HF.objectivesText(exp)),
        h('td', { title: HF.fmtTime(exp.created_at) }, HF.fmtTime(exp.created_at).slice(5, 16)),   // MM-DD hh:mm
        h('td.num', HF.fmtDur(dur)),
        h('td.num.storage', exp.checkpoint_bytes ? HF.fmtBytes(exp.checkpoint_bytes) : '–'),
        h('td', HF.experimentActions(exp, (r) => { exps.set(r.id, Object.assign(exps.get(r.id) || {}, r)); render(); })));
    }

    const render = HF.throttle(() => {
      if (closed) return;
      const list = [...exps.values()].sort((a, b) => b.id - a.id);
      tbody.replaceChildren(...list.map(row));
      emptyNote.hidden = list.length > 0;
      const c = document.getElementById('exp-count');
      if (c) c.textContent = list.length ? `${list.length} experiment${list.length > 1 ? 's' : ''}` : '';
    }, 250);

    async function load() {
      try {
        const q = [];
        if (tagFilter) q.push('tag=' + encodeURIComponent(tagFilter));
        if (HF.showArchived) q.push('archived=1');
        const r = await HF.api.get('/api/v1/experiments' + (q.length ? '?' + q.join('&') : ''));
        exps.clear();
        for (const e of r.experiments || []) exps.set(e.id, e);
        render();
      } catch (e) { HF.toast('loading experiments failed: ' + e.message, true); }
    }
    const reload = HF.throttle(load, 2000);

    offs.push(HF.live.on('experiment', (e) => {
      if (e && e.id != null && (e.deleted || (e.archived && !HF.showArchived))) { exps.delete(e.id); render(); return; }   // gone or hidden
      if (e && e.id != null && (!tagFilter || exps.has(e.id) || (e.tags || []).includes(tagFilter))) {
        exps.set(e.id, Object.assign(exps.get(e.id) || {}, e));
        if (tagFilter && !(e.tags || []).includes(tagFilter)) exps.delete(e.id);
        render();
      }
    }));
    // Trial changes move the counts; the experiment event usually follows,
    // but a throttled reload keeps the page right if it does not.
    offs.push(HF.live.on('trial', () => reload()));
    offs.push(HF.live.on('open', () => reload()));
    const tick = setInterval(render, 5000);   // durations of running experiments
    load();

    return () => { closed = true; offs.forEach((f) => f()); clearInterval(tick); render.cancel(); reload.cancel(); };
  };
})(window.HF);
