/* markdown.js — Markdown (descriptions, notes) rendered safely.
 *
 * marked turns the text into HTML; DOMPurify removes everything that could
 * run or load (scripts, event handlers, javascript: URLs, iframes, forms,
 * style) before the HTML reaches the page, and links open in a new tab
 * with rel="noopener noreferrer". HF.md is the only place in the dashboard
 * that assigns HTML built from user text. Without the two vendored
 * libraries (web/build.sh) the text is shown as plain text, never as HTML.
 */
'use strict';
(function (HF) {
  const ALLOWED = ['p', 'br', 'hr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'em', 'del', 's', 'code', 'pre',
    'blockquote', 'ul', 'ol', 'li', 'a', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'input', 'span'];
  let hooked = false;

  function purify(html) {
    const P = window.DOMPurify;
    if (!hooked) {
      P.addHook('afterSanitizeAttributes', (node) => {
        if (node.tagName === 'A') { node.setAttribute('target', '_blank'); node.setAttribute('rel', 'noopener noreferrer'); }
        if (node.tagName === 'INPUT') node.setAttribute('disabled', '');   // GFM task list boxes only
      });
      hooked = true;
    }
    return P.sanitize(html, {
      ALLOWED_TAGS: ALLOWED,
      ALLOWED_ATTR: ['href', 'title', 'type', 'checked', 'align', 'start'],
      ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
    });
  }

  /* An element (div.md) showing text as Markdown; `empty` when text is blank. */
  HF.md = function (text, empty) {
    const box = HF.h('div.md');
    if (!text || !String(text).trim()) {
      box.classList.add('muted');
      box.textContent = empty || '';
      return box;
    }
    if (window.marked && window.DOMPurify && window.DOMPurify.isSupported) {
      box.innerHTML = purify(window.marked.parse(String(text), { gfm: true, breaks: true, async: false }));
    } else {
      box.classList.add('md-plain');
      box.textContent = String(text);
    }
    return box;
  };
})(window.HF);
