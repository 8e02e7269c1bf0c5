/* logsearch.js — the "Search logs" panel, on the experiment page (every
 * trial's logs) and the trial page (its own): a pattern, regex and
 * ignore-case toggles, and the matching lines (GET .../logs?grep=, docs/
 * protocol.md "Log search"), oldest first, each with its trial (a link)
 * and the match highlighted; "more" pages on with after=next while the
 * answer says truncated. A bad regex shows the scheduler's message under
 * the box. Test hooks: #logsearch-input, #logsearch-results data-count,
 * #logsearch-error.
 *
 *   HF.logsearch.panel(host, {expId} | {trialId}) -> destroy()
 */
'use strict';
(function (HF) {
  const h = HF.h;
  const PAGE = 500;

  /* line with the matches of the fixed string needle wrapped in <mark>
   * (regex matches are not re-run in the browser: the line is shown as is). */
  function markHtml(line, needle, icase) {
    if (!needle) return HF.esc(line);
    const hay = icase ? line.toLowerCase() : line, nd = icase ? needle.toLowerCase() : needle;
    let out = '', at = 0;
    for (let k = hay.indexOf(nd); k >= 0; k = hay.indexOf(nd, k + nd.length)) {
      out += HF.esc(line.slice(at, k)) + '<mark>' + HF.esc(line.slice(k, k + nd.length)) + '</mark>';
      at = k + nd.length;
    }
    return out + HF.esc(line.slice(at));
  }

  HF.logsearch = {};
  HF.logsearch.panel = function (host, where) {
    const input = h('input#logsearch-input', { type: 'search', placeholder: where.expId ? 'search every trial\'s logs' : 'search this trial\'s log', style: { width: '320px' } });
    const re = h('input#logsearch-regex', { type: 'checkbox' });
    const ic = h('input#logsearch-icase', { type: 'checkbox' });
    const go = h('button.btn#logsearch-go', { type: 'submit' }, 'Search');
    const more = h('button.btn#logsearch-more', { type: 'button', hidden: true }, 'more');
    const err = h('div.form-error#logsearch-error', { hidden: true });
    const note = h('span.hint#logsearch-note');
    const results = h('div.logsearch-results#logsearch-results');
    const form = h('form.logsearch-form', input, h('label', re, 'regex'), h('label', ic, 'ignore case'), go);
    host.append(h('section.panel#logsearch-panel', h('div.panel-head', h('h2', 'Search logs'), note, h('div.spacer'), form), err, results, more));
    const S = { q: null, next: 0, count: 0, closed: false };

    async function fetchPage() {
      const q = S.q;
      const base = where.expId ? `/api/v1/experiments/${where.expId}/logs` : `/api/v1/trials/${where.trialId}/logs`;
      const url = `${base}?grep=${encodeURIComponent(q.pat)}&regex=${q.regex ? 1 : 0}&icase=${q.icase ? 1 : 0}&after=${S.next}&limit=${PAGE}`;
      try {
        const r = await HF.api.get(url);
        if (S.closed || S.q !== q) return;
        err.hidden = true;
        const frag = document.createDocumentFragment();
        for (const l of r.logs) {
          const row = h('div.logsearch-line');
          if (where.expId) row.append(h('a.mono', { href: `#/trials/${l.trial_id}` }, 't' + l.trial_id), ' ');
          const span = h('span.mono');
          span.innerHTML = markHtml(l.line, q.regex ? '' : q.pat, q.icase);
          if (l.stream === 'stderr') span.classList.add('stderr');
          row.append(span);
          frag.append(row);
        }
        results.append(frag);
        S.count += r.logs.length;
        S.next = r.next;
        results.dataset.count = String(S.count);
        more.hidden = !r.truncated;
        note.textContent = `${S.count} matching line${S.count === 1 ? '' : 's'}${r.truncated ? ' so far' : ''} · ${r.scanned} lines tried, ${r.ms} ms${r.indexed ? ', indexed' : ''}`;
        if (!S.count) results.replaceChildren(h('div.empty', 'no line matches'));
      } catch (e) {
        if (S.closed || S.q !== q) return;
        err.textContent = e.message;
        err.hidden = false;
        results.dataset.count = '0';
      }
    }

    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const pat = input.value;
      if (!pat) return;
      S.q = { pat, regex: re.checked, icase: ic.checked };
      S.next = 0; S.count = 0;
      results.replaceChildren();
      delete results.dataset.count;
      more.hidden = true;
      fetchPage();
    });
    more.addEventListener('click', () => { if (S.q) fetchPage(); });
    return () => { S.closed = true; };
  };
})(window.HF);
