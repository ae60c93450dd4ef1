/**
 * The report as one self-contained HTML page: inline CSS, charts as inline SVG, no script, no
 * external resource (so it opens from a CI artifact, offline, under any content security policy).
 */
import { renderChart } from './chart.js';
import type { Block, Report } from './doc.js';
import { LLMC_VERSION } from '../../core/version.js';

const esc = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

const CSS = `
:root { color-scheme: light; --fg: #1d2330; --muted: #5b6475; --line: #dde1e8; --bg: #fff; --band: #f5f7fa; --accent: #3b6ea8; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 20px 32px 12px; border-bottom: 1px solid var(--line); background: var(--band); }
header h1 { margin: 0 0 4px; font-size: 21px; }
header p { margin: 0; color: var(--muted); font-size: 13px; }
nav { padding: 8px 32px; border-bottom: 1px solid var(--line); font-size: 13px; }
nav a { color: var(--accent); margin-right: 16px; text-decoration: none; }
main { padding: 8px 32px 40px; max-width: 1240px; }
section { margin-top: 26px; }
h2 { font-size: 18px; margin: 0 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--accent); display: inline-block; }
.blocks { display: flex; flex-wrap: wrap; gap: 18px 28px; align-items: flex-start; }
.blocks > .wide { flex-basis: 100%; }
figure { margin: 0; }
figcaption { font-size: 13px; color: var(--muted); margin-bottom: 4px; max-width: 560px; }
figure svg { display: block; }
table { border-collapse: collapse; font-size: 13px; }
caption { text-align: left; font-size: 13px; color: var(--muted); padding-bottom: 4px; }
th, td { padding: 3px 12px 3px 0; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { font-weight: 600; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 18px; margin: 0; font-size: 14px; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
p.text { margin: 0; max-width: 900px; color: var(--fg); }
footer { padding: 16px 32px; color: var(--muted); font-size: 12px; border-top: 1px solid var(--line); }
`;

const isNumeric = (v: unknown) => typeof v === 'number' || (typeof v === 'string' && /^[-+]?[\d.,]+(e[-+]?\d+)?( ?(%|B|KiB|MiB|GiB|TiB))?$/.test(v));

function block(b: Block, id: string): string {
  switch (b.kind) {
    case 'text':
      return `<p class="text wide">${esc(b.text)}</p>`;
    case 'facts':
      return `<dl class="wide">${b.items.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join('')}</dl>`;
    case 'table':
      return (
        `<table>${b.caption ? `<caption>${esc(b.caption)}</caption>` : ''}<thead><tr>${b.columns.map((c) => `<th>${esc(c)}</th>`).join('')}</tr></thead>` +
        `<tbody>${b.rows.map((r) => `<tr>${r.map((c) => `<td${isNumeric(c) ? ' class="n"' : ''}>${esc(c ?? '—')}</td>`).join('')}</tr>`).join('\n')}</tbody></table>`
      );
    case 'chart':
      return `<figure id="${id}"><figcaption>${esc(b.caption)}</figcaption>${renderChart(id, b.chart).replace('<svg ', `<svg aria-label="${esc(b.caption)}" `)}</figure>`;
    case 'svg':
      return `<figure id="${id}"><figcaption>${esc(b.caption)}</figcaption>${b.svg}</figure>`;
  }
}

export function renderHtml(r: Report): string {
  const nav = r.sections.map((s) => `<a href="#${s.id}">${esc(s.title)}</a>`).join('');
  const body = r.sections
    .map((s) => `<section id="${s.id}" data-section="${s.id}"><h2>${esc(s.title)}</h2><div class="blocks">\n${s.blocks.map((b, i) => block(b, `${s.id}-${i}`)).join('\n')}\n</div></section>`)
    .join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>${esc(r.title)}</title>
<style>${CSS}</style>
</head>
<body>
<header><h1>${esc(r.title)}</h1><p>${esc(r.input.kind)}: ${esc(r.input.path)}</p></header>
<nav>${nav}</nav>
<main>
${body}
</main>
<footer>Written by llmc ${esc(LLMC_VERSION)}. Charts: Apache ECharts, rendered to SVG when the report was written; the page has no scripts.</footer>
</body>
</html>
`;
}
