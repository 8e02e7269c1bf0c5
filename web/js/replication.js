/* replication.js — the dashboard's view of the standby scheduler
 * (docs/dashboard.md, "Standby and failover").
 *
 * HF.repl.status is the last GET /api/v1/replication answer ({role, term,
 * lsn, state, primary, peers, standby, lag_ms, ...}: peers are objects of
 * kind standby, peer or primary (docs/protocol.md); null before the
 * first, and for a scheduler without replication: its answers carry no
 * X-Hyperfarm-Role (HF.api.role), so the route is not even asked, and
 * nothing is shown). It is read at start, after whoami (app.js waits for
 * both before drawing) and every POLL_MS after. It drives:
 *   - a banner under the top bar: on a standby (read-only, a link to the
 *     primary it follows, the lag), on a fenced scheduler, and on a
 *     primary whose replication state is "degraded" (its standby is lost;
 *     each standby it saw lately, by address and name, with its state and ack);
 *   - HF.repl.readOnly(), which HF.whyNot (api.js) consults first, so every
 *     control guarded for viewers is disabled on a standby too, with the
 *     reason as its tooltip; a change of role redraws the page;
 *   - failover: when this scheduler stops answering (FAIL_POLLS polls in a
 *     row), the primary and the URLs of the peers it last named are probed and the banner
 *     offers the first that answers, keeping the page's route. Another
 *     scheduler is another origin: its token must be entered there again.
 * URLs from the scheduler are shown only when they are http(s) URLs. */
'use strict';
(function (HF) {
  // HF_REPL_POLL_MS: a test's shorter period (tests/web/replication.test.js)
  const POLL_MS = window.HF_REPL_POLL_MS || 5000, FAIL_POLLS = 2, PROBE_MS = 3000;
  const repl = HF.repl = { status: null, failures: 0, offer: null, timer: null };

  /* url if it is an http(s) URL (no other scheme reaches an href), else null. */
  function httpUrl(u) {
    if (typeof u !== 'string') return null;
    try {
      const p = new URL(u);
      return p.protocol === 'http:' || p.protocol === 'https:' ? p.origin + p.pathname.replace(/\/+$/, '') : null;
    } catch (e) { return null; }
  }
  repl.httpUrl = httpUrl;

  /* '' when this scheduler takes writes, else why not (HF.whyNot). */
  repl.readOnly = function () {
    const s = repl.status;
    if (!s || s.role === 'primary' || !s.role) return '';
    if (s.role === 'fenced') return 'this scheduler was fenced (a newer primary exists): it is read-only';
    return 'this scheduler is a standby (read-only): make changes on the primary';
  };

  const ms = (v) => (v >= 10000 ? `${Math.round(v / 1000)} s` : `${Math.round(v || 0)} ms`);

  /* The entries of s.peers (docs/protocol.md "Replication"): objects with
   * a kind; an older scheduler's bare URL string reads as a peer. */
  function peers(s) {
    return (s && Array.isArray(s.peers) ? s.peers : [])
      .map((p) => (typeof p === 'string' ? { kind: 'peer', url: p } : p))
      .filter((p) => p && typeof p === 'object');
  }
  repl.peers = peers;

  function link(u) {
    const target = u + '/' + location.hash;
    return HF.h('a', { href: target, 'data-peer': u }, u);
  }

  /* The banner's content for the current status and offer; null = none. */
  function bannerContent() {
    const s = repl.status;
    if (repl.offer !== null) {
      const kids = [`This scheduler (${location.origin}) is not answering. `];
      if (repl.offer) kids.push('Another scheduler answers at ', link(repl.offer), ': open it (sign in there again).');
      else kids.push('None of the schedulers it named answers yet; still trying.');
      return { cls: 'bad', kind: 'lost', kids };
    }
    if (!s) return null;
    // a standby names the primary URL it streams from among its own
    const followed = peers(s).find((p) => p.kind === 'primary' && p.following === true);
    const primary = httpUrl(followed ? followed.url : s.primary);
    if (s.role === 'standby' || s.role === 'fenced') {
      const kids = [s.role === 'standby' ? 'Standby scheduler: read-only. ' : 'Fenced scheduler (a newer primary took over): read-only. '];
      kids.push(primary ? HF.h('span', 'Primary: ', link(primary), '. ') : 'Primary: unknown. ');
      if (s.role === 'standby') kids.push(`Lag: ${ms(s.lag_ms)}` + (s.applied_lsn != null ? ` (applied lsn ${s.applied_lsn}).` : '.'));
      return { cls: 'warn', kind: s.role, kids };
    }
    if (s.state === 'degraded') {
      const sb = s.standby;
      const seen = sb && sb.last_seen_ms_ago != null ? `; last seen ${ms(sb.last_seen_ms_ago)} ago` : '';
      const kids = [`Replication degraded: the standby is lost${seen}. Writes are acknowledged without it until it catches up.`];
      // every standby that streamed lately (by address and name: host:port), with its own state
      for (const p of peers(s).filter((q) => q.kind === 'standby')) {
        const who = p.name ? `${p.address} (${p.name})` : String(p.address);
        kids.push(' ', HF.h('span', { 'data-standby': who },
          `Standby ${who}: ${p.state}, acked lsn ${p.acked_lsn}, last seen ${ms(p.last_seen_ms_ago)} ago.`));
      }
      return { cls: 'bad', kind: 'degraded', kids };
    }
    return null;
  }

  function render() {
    const el = document.getElementById('repl-banner');
    if (!el) return;
    const b = bannerContent();
    el.hidden = !b;
    el.className = 'repl-banner' + (b ? ' ' + b.cls : '');
    el.dataset.kind = b ? b.kind : '';
    el.replaceChildren(...(b ? b.kids.map((k) => (typeof k === 'string' ? document.createTextNode(k) : k)) : []));
  }
  repl.render = render;

  /* Does a scheduler answer at url? A cross-origin request without CORS
   * (mode no-cors: the answer is opaque, but it arrived). */
  async function answers(url) {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), PROBE_MS);
    try { await fetch(url + '/healthz', { mode: 'no-cors', cache: 'no-store', signal: ctl.signal }); return true; }
    catch (e) { return false; }
    finally { clearTimeout(t); }
  }

  async function probePeers() {
    const s = repl.status || {};
    const cands = [s.primary].concat(peers(s).map((p) => p.url)).map(httpUrl)
      .filter((u, i, a) => u && u !== location.origin && a.indexOf(u) === i);
    for (const u of cands) if (await answers(u)) return u;
    return '';
  }

  /* One poll: the status, or after FAIL_POLLS failures the peers' probe.
   * RET a promise; never throws. */
  repl.load = async function () {
    let s;
    // a scheduler without replication (no X-Hyperfarm-Role on its answers)
    // has no route to ask: nothing to show, and no 404 in the console
    if (!HF.api.role && repl.status === null && repl.offer === null) return null;
    try {
      s = await HF.api.get('/api/v1/replication');
    } catch (e) {
      if (e.status === 404) { repl.status = null; repl.failures = 0; repl.offer = null; render(); return null; }
      if (e.status === 0 || e.status >= 502) {
        if (++repl.failures >= FAIL_POLLS) { repl.offer = repl.offer || ''; repl.offer = await probePeers(); }
      }
      render();
      return repl.status;
    }
    const before = repl.readOnly();
    repl.status = s && typeof s === 'object' ? s : null;
    repl.failures = 0;
    repl.offer = null;
    render();
    if (before !== repl.readOnly() && repl.started) window.dispatchEvent(new HashChangeEvent('hashchange'));
    return repl.status;
  };

  /* Start polling (app.js, after the first load). One poll at a time: a
   * peers' probe can outlast POLL_MS (PROBE_MS for each peer that does not
   * answer), and two probes in flight would each write repl.offer, the
   * later one's (perhaps a peer that timed out under load) last. */
  repl.start = function () {
    repl.started = true;
    clearInterval(repl.timer);
    let busy = false;
    repl.timer = setInterval(async () => {
      if (busy) return;
      busy = true;
      try { await repl.load(); } finally { busy = false; }
    }, POLL_MS);
  };
})(window.HF);
