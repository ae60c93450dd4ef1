/**
 * Section of record `expert-table/2` (the expert-bits pass): the plan (budget, bytes, held-out loss
 * against the uniform formats) and, for a maxLoss plan, what the written artifact measured on its
 * own runtime: each plan tried with its held-out (proxy) loss, the artifact's loss and upper bound.
 */
import { EXPERT_TABLE, type ExpertTable } from '../../../core/records/expert-table.js';
import { fmtNum, type Block } from '../doc.js';
import { recordSection } from './types.js';

const pct = (x: number) => `${x >= 0 ? '+' : ''}${fmtNum(100 * x, 3)}%`;

export const expertBitsSection = recordSection<ExpertTable>({
  record: EXPERT_TABLE,
  async build(record) {
    if (!record) return null;
    const r = record;
    const a = r.artifact;
    const budget = r.budget.kind === 'maxLoss' ? `maxLoss ${pct(r.budget.value)}` : `${r.budget.kind} ${r.budget.value}${r.budget.bytes !== undefined ? ` (${r.budget.bytes} bytes)` : ''}`;
    const items: [string, string][] = [
      ['strategy', `${r.strategy} over ${r.items.length} ${r.granularity} items`],
      ['budget', budget],
      ['plan', `${r.plan.bytes} bytes, ${fmtNum(r.plan.bpw, 4)} bits per weight, held-out perplexity ${pct(r.plan.heldOutLoss)}`],
    ];
    if (a) {
      items.push([
        'on the written artifact',
        `${pct(a.loss)} (${Math.round(100 * a.confidence)}% upper bound ${pct(a.upperBound)}) on ${a.engine}, ${a.sequences} acceptance sequences, ${a.tokens} tokens, against the ${a.reference} experts`,
      ]);
    }
    const blocks: Block[] = [{ kind: 'facts', items }];
    if (a) {
      blocks.push({
        kind: 'table',
        caption: 'Plans tried on the artifact: the bound the search ran under, bytes, held-out (proxy) loss, the artifact loss and its upper bound',
        columns: ['search bound', 'bytes', 'held-out', 'artifact', 'upper bound', 'accepted'],
        rows: a.rounds.map((x) => [pct(x.searchLoss), String(x.bytes), pct(x.heldOutLoss), pct(x.loss), pct(x.upperBound), x.accepted ? 'yes' : 'no']),
      });
    }
    blocks.push({
      kind: 'table',
      caption: 'Every candidate as one format for all items',
      columns: ['format', 'bytes', 'held-out'],
      rows: r.uniform.map((u) => [u.format, String(u.bytes), pct(u.heldOutLoss)]),
    });
    return { id: 'expert-bits', title: 'Expert bits: a format per expert', blocks, data: { plan: r.plan, artifact: a, uniform: r.uniform } };
  },
});
