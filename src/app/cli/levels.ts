/**
 * Quality where the user picks a level: the table `llmc compile` ends with (the line `llmc run --level`
 * prints is the runner's note, levelNotes in src/core/records/elastic.ts). Both read the elastic record
 * (elastic-prefix) of a manifest; a level whose held-out perplexity is at or above the vocabulary size
 * (uniform guessing) is flagged.
 */
import { TARGETS } from '../../../backends/index.js';
import { formatBytes } from './output.js';
import { ELASTIC_LEVELS, findRecord, formatLevelFraction as pct, formatPerplexity as ppl, worseThanUniform, type ElasticLevels, type Level, type Manifest } from '../../core/records/index.js';

export interface LevelRow {
  id: string;
  paramFrac: number;
  /** Bytes of the level as deployed (exact for ts and gguf-levels; else the weights' bytes per parameter × its parameters). */
  bytes: number;
  bytesExact: boolean;
  heldOutPpl?: number;
  agreement?: number;
  unrecovered?: { heldOutPpl: number; agreement: number };
  worseThanUniform: boolean;
}

/** The rows of the compile-end table, or null when the manifest has no elastic levels. */
export function levelRows(manifest: Manifest): { record: ElasticLevels; rows: LevelRow[] } | null {
  const record = findRecord(manifest.passes, ELASTIC_LEVELS);
  if (!record) return null;
  const vocab = manifest.arch.vocabSize;
  const bytesOf = levelBytes(manifest, record);
  const rows = record.levels.map((lv) => ({
    id: lv.id,
    paramFrac: lv.paramFrac,
    ...bytesOf(lv),
    heldOutPpl: lv.heldOutPpl,
    agreement: lv.agreement,
    unrecovered: lv.unrecovered,
    worseThanUniform: worseThanUniform(lv.heldOutPpl, vocab),
  }));
  return { record, rows };
}

/** A level's bytes: exact where its target's layout gives them (TargetDescriptor.levelBytes), else its share of the files. */
function levelBytes(manifest: Manifest, record: ElasticLevels): (lv: Level) => { bytes: number; bytesExact: boolean } {
  const exact = TARGETS.find((t) => t.name === manifest.target)?.levelBytes;
  if (exact) return (lv) => ({ bytes: exact(manifest, lv), bytesExact: true });
  const total = manifest.files.reduce((n, f) => n + f.size, 0);
  return (lv) => ({ bytes: Math.round((total * lv.params) / record.full.params), bytesExact: false });
}

/** The table as text (stderr at the end of `llmc compile`). */
export function formatLevelTable(record: ElasticLevels, rows: LevelRow[], vocabSize: number): string {
  const recovered = rows.some((r) => r.unrecovered);
  const head = ['level', 'params', 'bytes', 'held-out ppl', 'greedy agree', ...(recovered ? ['before recovery: ppl', 'agree'] : [])];
  const body = rows.map((r) => [
    r.id,
    pct(r.paramFrac),
    (r.bytesExact ? '' : '≈') + formatBytes(r.bytes),
    ppl(r.heldOutPpl) + (r.worseThanUniform ? ' !' : ''),
    pct(r.agreement),
    ...(recovered ? [ppl(r.unrecovered?.heldOutPpl), pct(r.unrecovered?.agreement)] : []),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  const out = [line(head), ...body.map(line)];
  const notes: string[] = [];
  if (record.heldOutPpl !== undefined) notes.push(`full model: held-out perplexity ${ppl(record.heldOutPpl)}; uniform guessing: ${vocabSize}`);
  if (rows.some((r) => r.worseThanUniform)) notes.push(`! worse than uniform guessing over the ${vocabSize}-token vocabulary: that level's output is noise`);
  if (rows.every((r) => r.heldOutPpl === undefined)) notes.push('held-out quality not measured (--opt reorder.evaluate=true measures it)');
  const rec = record.recovery;
  if (recovered && rec?.method === 'lora') notes.push(`recovery: LoRA r=${rec.rank}, ${rec.steps} steps per level, distilled from the full model`);
  if (rec?.method === 'distill') {
    const was = rec.originalHeldOutPpl !== undefined ? ` (full model before training ${ppl(rec.originalHeldOutPpl)})` : '';
    notes.push(`recovery: joint elastic distillation of the shared weights, ${rec.steps} steps over ${rec.tokens} tokens, weights of step ${rec.bestStep} kept${was}`);
  }
  return [...out, ...notes].join('\n');
}
