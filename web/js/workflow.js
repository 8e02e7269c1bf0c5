/* workflow.js — the experiment workflow of issue #17 in the dashboard
 * (docs/dashboard.md, "Workflow"):
 *
 *   HF.tagChips(tags, onclick)       tag chips (experiments list, header)
 *   HF.exp.panels.workflow(store, root)
 *                                    the experiment page's workflow panel:
 *                                    who submitted it, its parent, warm
 *                                    start, Extend and Fork, editable tags
 *                                    and Markdown description, and what
 *                                    users did (GET /experiments/{id}/events)
 *   HF.startFork(exp)                opens the New-experiment editor on the
 *                                    experiments page prefilled with exp's
 *                                    file; it then submits to /fork
 *   HF.takeFork()                    what submit_panel.js asks on mount
 *   HF.trialNotes(trialId)           the trial page's Notes panel
 *
 * Every user text is shown through textContent or HF.md (Markdown through
 * DOMPurify): nothing here assigns HTML. Edits go through PATCH and the
 * panel redraws from the answer, so what is shown is what was stored.
 */
'use strict';
(function (HF) {
  const h = HF.h;

  HF.api.patch = (p, b) => HF.api.req('PATCH', p, b);

  HF.tagChips = function (tags, onclick) {
    return h('span.tags', (tags || []).map((t) => (onclick
      ? h('a.tag', { href: '#/experiments', 'data-tag': t, onclick: (ev) => { ev.preventDefault(); ev.stopPropagation(); onclick(t); } }, t)
      : h('span.tag', { 'data-tag': t }, t))));
  };

  /* ---- fork: from the experiment page to the editor ---- */
  let pendingFork = null;
  HF.startFork = function (exp) {
    const cfg = JSON.parse(JSON.stringify(exp.config || {}));
    cfg.name = (exp.name || 'experiment') + ' (fork)';
    if (exp.description) cfg.description = exp.description; else delete cfg.description;
    if (exp.tags && exp.tags.length) cfg.tags = exp.tags.slice(); else delete cfg.tags;
    pendingFork = { id: exp.id, name: exp.name, text: JSON.stringify(cfg, null, 2) };
    location.hash = '#/experiments';
  };
  HF.takeFork = function () { const f = pendingFork; pendingFork = null; return f; };

  /* A Markdown text with Edit / Save / Cancel; save(text) returns a promise
   * of the stored text. ids: prefix for the test hooks (-view, -edit, -text, -save). */
  function mdEditor(prefix, empty, save) {
    const view = h('div#' + prefix + '-view');
    const ta = h('textarea#' + prefix + '-text', { placeholder: 'Markdown: **bold**, lists, `code`, [links](https://…)' });
    const saveBtn = h('button.btn.small.primary#' + prefix + '-save', 'Save');
    const editBox = h('div.wf-editor', { hidden: true }, ta,
      h('div.row.end', { style: { marginTop: '6px' } },
        h('button.btn.small', { onclick: () => { editBox.hidden = true; view.hidden = false; } }, 'Cancel'), saveBtn));
    const editBtn = h('button.btn.small#' + prefix + '-edit', 'Edit');
    let text = '';
    const ed = {
      el: h('div', view, editBox),
      editBtn,
      editing: () => !editBox.hidden,
      set(t) { text = t || ''; if (!ed.editing()) view.replaceChildren(HF.md(text, empty)); },
    };
    editBtn.addEventListener('click', () => { ta.value = text; editBox.hidden = false; view.hidden = true; ta.focus(); });
    saveBtn.addEventListener('click', async () => {
      saveBtn.disabled = true;
      try {
        const stored = await save(ta.value);
        editBox.hidden = true; view.hidden = false;
        ed.set(stored);
        HF.toast('saved');
      } catch (e) { HF.toast('saving failed: ' + (e.error || e.message), true); }
      finally { saveBtn.disabled = false; }
    });
    return ed;
  }

  HF.exp.panels.workflow = function (store, root) {
    const id = store.id;
    const meta = h('div.wf-meta#exp-meta');
    const tagsBox = h('span#exp-tags');
    const tagIn = h('input#tag-input', { type: 'text', placeholder: 'new tag', size: 12, maxlength: 64 });
    const addTag = h('button.btn.small#tag-add', 'Add tag');
    const extendN = h('input#extend-n', { type: 'number', min: 1, max: 100000, value: 10 });
    const extendBtn = h('button.btn.small#extend-exp', 'Extend');
    const forkBtn = h('button.btn.small#fork-exp', { title: 'open the New-experiment editor with this file' }, 'Fork…');
    const evList = h('ul.wf-events#exp-events');
    const desc = mdEditor('desc', 'No description. Edit to say what this sweep is for.', async (text) => {
      const r = await HF.api.patch('/api/v1/experiments/' + id, { description: text.trim() ? text : null });
      store.mergeExp(r);
      return r.description;
    });

    root.append(h('section.panel#exp-workflow',
      h('div.panel-head', h('h2', 'About'), meta, h('div.spacer'),
        h('span.inline-form', h('span.muted', 'add'), extendN, h('span.muted', 'trials'), extendBtn), forkBtn),
      h('div.wf-grid',
        h('div', h('div.row', { style: { marginBottom: '8px' } }, h('span.muted', 'tags'), tagsBox, tagIn, addTag),
          h('div.row', { style: { marginBottom: '4px' } }, h('span.muted', 'description'), h('div.spacer'), desc.editBtn),
          desc.el),
        h('div', h('div.muted', { style: { marginBottom: '4px' } }, 'what users did'), evList))));

    async function patchTags(body) {
      const r = await HF.api.act('tags', () => HF.api.patch('/api/v1/experiments/' + id, body));
      if (r) store.mergeExp(r);
    }
    addTag.addEventListener('click', () => {
      const t = tagIn.value.trim();
      if (!t) return;
      tagIn.value = '';
      patchTags({ add_tags: [t] });
    });
    tagIn.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') addTag.click(); });
    extendBtn.addEventListener('click', async () => {
      const n = Math.floor(+extendN.value);
      if (!(n >= 1)) { HF.toast('extend: give a number of trials ≥ 1', true); return; }
      extendBtn.disabled = true;
      const r = await HF.api.act(`extend experiment ${id} by ${n}`,
        () => HF.api.post(`/api/v1/experiments/${id}/extend`, { add_trials: n }));
      extendBtn.disabled = false;
      if (r) store.mergeExp(r);
    });
    forkBtn.addEventListener('click', () => { if (store.exp) HF.startFork(store.exp); });

    function render() {
      const e = store.exp;
      if (!e) return;
      const bits = [];
      const b = (label, v) => h('span', label, ' ', h('b', v));
      bits.push(b('submitted by', e.submitted_by || 'unknown'));
      if (HF.ownerOf(e) !== e.submitted_by) bits.push(b('owner', HF.ownerOf(e)));
      if (e.parent_experiment) bits.push(h('span', 'forked from ', h('a#exp-parent', { href: '#/experiments/' + e.parent_experiment }, '#' + e.parent_experiment)));
      if (e.warm_start) bits.push(h('span#exp-warm', 'warm start ', h('b', String(e.warm_start.observed)), ' observed · ', h('b', String(e.warm_start.enqueued)), ' enqueued'));
      if (e.seed != null) bits.push(b('seed', String(e.seed)));
      meta.replaceChildren(...bits);
      const chips = (e.tags || []).map((t) => h('span.tag', { 'data-tag': t }, t,
        HF.whyNot(e) ? null : h('button', { title: 'remove tag ' + t, 'data-remove': t, onclick: () => patchTags({ remove_tags: [t] }) }, '×')));
      tagsBox.replaceChildren(...(chips.length ? chips : [h('span.muted', 'none')]));
      extendBtn.disabled = e.state === 'CANCELED';
      [extendBtn, extendN, addTag, tagIn, desc.editBtn].forEach((el) => HF.guard(el, e));
      HF.guard(forkBtn);   // anyone who may submit may fork (the fork is theirs)
      desc.set(e.description);
    }

    async function loadEvents() {
      // A deleted experiment has no events left to ask for (a 404).
      if (store.closed || (store.exp && store.exp.deleted)) return;
      try {
        const r = await HF.api.get(`/api/v1/experiments/${id}/events?limit=200`);
        const evs = (r.events || []).filter((x) => x.user);
        evList.replaceChildren(...evs.map((x) => h('li',
          h('span.t', HF.fmtTime(x.time)), h('span.who', x.user), HF.badge(x.type),
          x.trial_id ? h('a', { href: '#/trials/' + x.trial_id }, 'trial ' + x.trial_id) : null,
          h('span', x.detail || ''))));
        if (!evs.length) evList.replaceChildren(h('li.muted', 'nothing yet'));
        evList.scrollTop = evList.scrollHeight;
      } catch (err) { /* an older scheduler: keep the list empty */ }
    }
    const eventsSoon = HF.throttle(loadEvents, 1000);

    store.on('all', () => { render(); eventsSoon(); });
    store.on('exp', () => { render(); eventsSoon(); });
    return () => eventsSoon.cancel();
  };

  HF.trialNotes = function (trialId) {
    const ed = mdEditor('notes', 'No notes. Edit to write down what you learned from this trial.', async (text) => {
      const r = await HF.api.patch('/api/v1/trials/' + trialId, { notes: text.trim() ? text : null });
      return r.notes;
    });
    return {
      el: h('section.panel#trial-notes', h('div.panel-head', h('h2', 'Notes'), h('span.hint', 'Markdown'), h('div.spacer'), ed.editBtn), ed.el),
      set: (t) => ed.set(t && t.notes),
      guard: (exp) => HF.guard(ed.editBtn, exp),   // exp: the trial's experiment
    };
  };
})(window.HF);
