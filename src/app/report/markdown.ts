/** The report as Markdown: the same sections, tables as tables; charts are named and their figures are in the tables and --json. */
import type { Block, Report } from './doc.js';

const cell = (v: unknown) => String(v ?? '—').replace(/\|/g, '\\|').replace(/\n/g, ' ');

function block(b: Block): string {
  switch (b.kind) {
    case 'text':
      return b.text;
    case 'facts':
      return ['| | |', '|---|---|', ...b.items.map(([k, v]) => `| ${cell(k)} | ${cell(v)} |`)].join('\n');
    case 'table':
      return [
        ...(b.caption ? [`*${b.caption}*`, ''] : []),
        `| ${b.columns.map(cell).join(' | ')} |`,
        `|${b.columns.map(() => '---').join('|')}|`,
        ...b.rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
      ].join('\n');
    case 'chart':
    case 'svg':
      return `*Chart (in the HTML report): ${b.caption}.*`;
  }
}

export function renderMarkdown(r: Report): string {
  return [`# ${r.title}`, '', `${r.input.kind}: \`${r.input.path}\``, '', ...r.sections.flatMap((s) => [`## ${s.title}`, '', ...s.blocks.flatMap((b) => [block(b), ''])])].join('\n');
}
