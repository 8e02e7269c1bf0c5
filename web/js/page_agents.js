/* page_agents.js — #/agents: every agent with its state, slots in use, GPUs,
 * running trials and last heartbeat (ticking "n s ago"), live via `agent`
 * events. Field names follow GET /api/v1/agents; a few aliases are accepted
 * (last_heartbeat / last_heartbeat_at / last_seen) so a renamed field does
 * not blank the column. */
'use strict';
(function (HF) {
  const h = HF.h;
  const pick = (o, ...ks) => { for (const k of ks) if (o && o[k] != null) return o[k]; return null; };

  HF.pages = HF.pages || {};
  HF.pages.agents = function (root) {
    const agents = new Map();
    const offs = [];
    let closed = false;
    const tbody = h('tbody');
    const note = h('div.empty', { hidden: true }, 'No agent has registered. Start one: hyperfarm-agent --scheduler URL');
    // The agent provisioner's panel, filled by loadProv below.
    const prov = h('section.panel#provision-panel', { hidden: true });
    root.append(
      h('div.page-head', h('h1', 'Agents'), h('span.sub#agent-count'), h('div.spacer'),
        h('span.hint', 'an agent whose heartbeat is older than the scheduler\'s --agent-timeout is marked LOST')),
      prov,
      h('section.panel', h('div.table-wrap', { style: { maxHeight: 'none', border: 0 } },
        h('table.data#agents-table', h('thead', h('tr', ['ID', 'Name', 'State', 'Host', 'Slots used', 'GPUs', 'Running trials', 'Last heartbeat', 'Version'].map((t) => h('th', t)))), tbody), note)));

    // The agent provisioner (GET /api/v1/provisioner; docs/deploy.md "Slurm"):
    // shown only when the scheduler runs one.
    async function loadProv() {
      let p;
      try { p = await HF.api.get('/api/v1/provisioner'); } catch (e) { return; }
      if (closed || !p || !p.enabled) { prov.hidden = true; return; }
      const c = p.counts || {};
      const jobs = Array.isArray(p.jobs) ? p.jobs : [];
      prov.hidden = false;
      prov.replaceChildren(...[   // (replaceChildren would print a null)
        h('h2', `${p.provisioner === 'slurm' ? 'Slurm' : p.provisioner} provisioner`),
        h('div.sub#provision-counts', `${c.pending || 0} pending · ${c.running || 0} running · ${c.nodes || 0} nodes · ` +
          `${c.submitted || 0} submitted · ${c.released || 0} released · ${c.canceled || 0} cancelled` +
          (c.errors ? ` · ${c.errors} errors` : '')),
        p.last_error ? h('div.muted', 'last error: ' + p.last_error) : null,
        jobs.length ? h('table.data#provision-jobs', h('thead', h('tr', ['Job', 'Nodes', 'State', 'Agents'].map((t) => h('th', t)))),
          h('tbody', jobs.map((j) => h('tr', h('td.mono', j.id), h('td.num', j.nodes), h('td', HF.badge(String(j.state || '').toUpperCase())),
            h('td.num', j.state === 'released' ? '' : (j.agents || 0)))))) : h('div.muted', 'no job: the queue needs no agent'),
      ].filter(Boolean));
    }

    function running(a) {
      const r = pick(a, 'running', 'running_trials', 'trials') || [];
      return (Array.isArray(r) ? r : []).map((x) => (typeof x === 'object' && x ? pick(x, 'trial_id', 'id') : x)).filter((x) => x != null);
    }
    function gpuCell(a) {
      const g = pick(a, 'gpus') || [];
      if (!Array.isArray(g) || !g.length) return h('span.muted', 'CPU only');
      return h('div', g.map((x) => h('div', { style: { fontSize: '12px' } },
        typeof x === 'object' ? `${x.index != null ? x.index + ': ' : ''}${x.name || 'GPU'}${x.memory_mb ? ` · ${(x.memory_mb / 1024).toFixed(0)} GiB` : ''}` : String(x))));
    }
    function row(a) {
      const run = running(a);
      const slots = pick(a, 'slots', 'slots_total');
      const used = pick(a, 'slots_used', 'used_slots', 'busy_slots');
      const usedN = used != null ? used : run.length;
      const hb = pick(a, 'last_heartbeat', 'last_heartbeat_at', 'last_seen', 'heartbeat_at');
      const state = pick(a, 'state', 'status') || '?';
      return h('tr', { 'data-id': a.id },
        h('td.num', a.id),
        h('td', a.name || ''),
        h('td', HF.badge(state)),
        h('td.mono', pick(a, 'host', 'address') || ''),
        h('td', h('div', `${usedN} / ${slots != null ? slots : '?'}`),
          slots ? h('div.progress', { style: { width: '90px', marginTop: '3px' } }, h('span.running', { style: { width: Math.min(100, 100 * usedN / slots) + '%' } })) : null),
        h('td', gpuCell(a)),
        h('td', { style: { whiteSpace: 'normal' } }, run.length ? run.map((tid) => h('a', { href: '#/trials/' + tid, style: { marginRight: '8px' } }, '#' + tid)) : h('span.muted', 'idle')),
        h('td', { title: HF.fmtTime(hb), class: 'hb' }, HF.fmtAgo(hb)),
        h('td.muted', pick(a, 'version') || ''));
    }
    const render = HF.throttle(() => {
      if (closed) return;
      const list = [...agents.values()].sort((x, y) => x.id - y.id);
      tbody.replaceChildren(...list.map(row));
      note.hidden = list.length > 0;
      const c = document.getElementById('agent-count');
      if (c) c.textContent = list.length ? `${list.length} agent${list.length > 1 ? 's' : ''}` : '';
    }, 300);

    async function load() {
      try {
        const r = await HF.api.get('/api/v1/agents');
        agents.clear();
        for (const a of (r && (r.agents || (Array.isArray(r) ? r : []))) || []) agents.set(a.id, a);
        render(); render.flush();
        root.dataset.loaded = '1';
      } catch (e) { HF.toast('loading agents failed: ' + e.message, true); }
    }
    const reload = HF.throttle(load, 2000);
    offs.push(HF.live.on('agent', (a) => { if (a && a.id != null) { agents.set(a.id, Object.assign(agents.get(a.id) || {}, a)); render(); } }));
    offs.push(HF.live.on('trial', () => reload()));   // running lists change with trials
    offs.push(HF.live.on('open', () => reload()));
    const tick = setInterval(render, 1000);
    const refetch = setInterval(() => { reload(); loadProv(); }, 5000);   // heartbeats need not be events
    load();
    loadProv();
    return () => { closed = true; offs.forEach((f) => f()); clearInterval(tick); clearInterval(refetch); render.cancel(); reload.cancel(); };
  };
})(window.HF);
