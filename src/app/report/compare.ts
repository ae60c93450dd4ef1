/**
 * `llmc report A B`: two artifacts side by side — what they are, bytes per tensor group and format,
 * quality against their sources (when measured), and every tensor whose format differs. Tensors are
 * matched by their Hugging Face name, which every target records for its tensors (ts, gguf, cuda);
 * formats compare by name in any case and alias (cuda's fp16 is gguf's F16).
 */
import path from 'node:path';
import { LlmcError } from '../../core/errors.js';
import { formatIn } from '../../core/pipeline/format-names.js';
import type { Manifest } from '../../core/records/manifest.js';
import { SHARED_TARGET_INFO } from '../../core/records/target-info.js';
import type { QualityFacts, ReportContext } from './context.js';
import { fmtBytes, fmtNum, type Cell, type Report, type Section } from './doc.js';
import { latencyBlocks } from './sections/resources.js';

/** Each source tensor's format as the artifact wrote it, or null when its target does not record one per tensor. */
export function tensorFormats(m: Manifest): Map<string, string> | null {
  const info = SHARED_TARGET_INFO.read(m.targetInfo);
  if (info.tensors) {
    const out = new Map<string, string>();
    // ts: {name, format}; gguf: {name, source, type}.
    for (const t of info.tensors) {
      const format = t.format ?? t.type;
      if (format !== undefined) out.set(t.source ?? t.name, format);
    }
    return out;
  }
  if (info.formats) return new Map(Object.entries(info.formats));
  return null;
}

const sameFormat = (a: string, b: string) => formatIn([a], b) !== null;
const total = (m: Manifest) => m.files.reduce((s, f) => s + f.size, 0);
const ratio = (a: number, b: number) => (a > 0 ? `${((100 * b) / a).toFixed(1)}%` : '—');

export function compareReport(a: ReportContext, b: ReportContext): Report {
  const [ma, mb] = [a.manifest, b.manifest];
  if (!ma) throw new LlmcError('llmc report A B compares two artifacts; this is a profile', a.dir, 2);
  if (!mb) throw new LlmcError('llmc report A B compares two artifacts; this is a profile', b.dir, 2);
  const [na, nb] = [a.path ?? a.dir, b.path ?? b.dir].map((d) => path.basename(path.resolve(d)));
  const [la, lb] = na === nb ? ['A', 'B'] : [na, nb];
  const sections: Section[] = [];

  const quant = (m: Manifest) => SHARED_TARGET_INFO.read(m.targetInfo).quant ?? '—';
  sections.push({
    id: 'side-by-side',
    title: 'The two artifacts',
    blocks: [
      {
        kind: 'table',
        columns: ['', la, lb],
        rows: [
          ['path', a.path ?? a.dir, b.path ?? b.dir],
          ['target', ma.target, mb.target],
          ['quant', quant(ma), quant(mb)],
          ['passes', ma.passes.map((p) => p.name).join(', ') || 'none', mb.passes.map((p) => p.name).join(', ') || 'none'],
          ['files', String(ma.files.length), String(mb.files.length)],
          ['bytes', fmtBytes(total(ma)), `${fmtBytes(total(mb))} (${ratio(total(ma), total(mb))} of ${la})`],
          ['source', `${ma.source.path} (${ma.source.sha256.slice(0, 12)}…)`, ma.source.sha256 === mb.source.sha256 ? 'the same checkpoint' : `${mb.source.path} (${mb.source.sha256.slice(0, 12)}…): another checkpoint`],
        ],
      },
    ],
    data: { a: { path: a.path ?? a.dir, target: ma.target, quant: quant(ma), bytes: total(ma), files: ma.files.length }, b: { path: b.path ?? b.dir, target: mb.target, quant: quant(mb), bytes: total(mb), files: mb.files.length }, sameSource: ma.source.sha256 === mb.source.sha256 },
  });

  const [ga, gb] = [a.groups ?? [], b.groups ?? []];
  if (ga.length || gb.length) {
    const groups = [...new Set([...ga, ...gb].map((g) => g.group))];
    const sum = (gs: typeof ga, group: string) => gs.filter((g) => g.group === group).reduce((s, g) => s + g.bytes, 0);
    const formats = (gs: typeof ga, group: string) => gs.filter((g) => g.group === group).map((g) => g.format).join(', ') || '—';
    const rows: Cell[][] = groups.map((g) => [g, formats(ga, g), fmtBytes(sum(ga, g)), formats(gb, g), fmtBytes(sum(gb, g)), ratio(sum(ga, g), sum(gb, g))]);
    sections.push({
      id: 'sizes',
      title: 'Bytes per tensor group',
      blocks: [{ kind: 'table', columns: ['group', `${la} format`, `${la} bytes`, `${lb} format`, `${lb} bytes`, `${lb} / ${la}`], rows }],
      data: { groups: groups.map((g) => ({ group: g, a: { formats: formats(ga, g), bytes: sum(ga, g) }, b: { formats: formats(gb, g), bytes: sum(gb, g) } })) },
    });
  }

  const [qa, qb] = [a.quality, b.quality];
  if (qa || qb) {
    const row = (label: string, f: (q: QualityFacts) => number | null): Cell[] => [label, qa ? fmtNum(f(qa)) : 'not measured', qb ? fmtNum(f(qb)) : 'not measured'];
    sections.push({
      id: 'quality',
      title: 'Quality against the source (held-out data)',
      blocks: [
        {
          kind: 'table',
          columns: ['', la, lb],
          rows: [
            ['executor', qa?.executor ?? '—', qb?.executor ?? '—'],
            row('source perplexity', (q) => q.sourcePpl),
            row('artifact perplexity', (q) => q.artifactPpl),
            row('perplexity delta', (q) => q.pplDelta),
            row('KL (nats)', (q) => q.kl),
            row('greedy agreement', (q) => q.greedyAgreement),
            row('decode tokens/s', (q) => q.tokensPerSecond),
          ],
        },
      ],
      data: { a: qa, b: qb },
    });
  }

  const speed = latencyBlocks([
    { name: la, tokenMs: qa?.tokenMs ?? null, tokensPerSecond: qa?.tokensPerSecond ?? null, executor: qa?.executor ?? '' },
    { name: lb, tokenMs: qb?.tokenMs ?? null, tokensPerSecond: qb?.tokensPerSecond ?? null, executor: qb?.executor ?? '' },
  ]);
  if (speed.length) {
    const tps = (q: QualityFacts | null) => q?.tokensPerSecond ?? null;
    sections.push({
      id: 'speed',
      title: 'Decode speed',
      blocks: [
        ...speed,
        { kind: 'table', columns: ['', la, lb], rows: [['decode tokens/s', fmtNum(tps(qa)), fmtNum(tps(qb))], ['runner', qa?.executor ?? '—', qb?.executor ?? '—'], [`${lb} / ${la}`, '1', tps(qa) && tps(qb) ? fmtNum(tps(qb)! / tps(qa)!, 3) : '—']] },
      ],
      data: { a: { executor: qa?.executor ?? null, tokensPerSecond: tps(qa), tokenMs: qa?.tokenMs ?? null }, b: { executor: qb?.executor ?? null, tokensPerSecond: tps(qb), tokenMs: qb?.tokenMs ?? null } },
    });
  }

  const [fa, fb] = [tensorFormats(ma), tensorFormats(mb)];
  if (fa && fb) {
    const names = [...new Set([...fa.keys(), ...fb.keys()])].sort();
    const differ = names.filter((n) => !fa.has(n) || !fb.has(n) || !sameFormat(fa.get(n)!, fb.get(n)!));
    sections.push({
      id: 'tensor-formats',
      title: `Tensors whose format differs (${differ.length} of ${names.length})`,
      blocks: differ.length
        ? [{ kind: 'table', columns: ['tensor', la, lb], rows: differ.map((n) => [n, fa.get(n) ?? 'not recorded', fb.get(n) ?? 'not recorded']) }]
        : [{ kind: 'text', text: `Every one of the ${names.length} tensors has the same format in both.` }],
      data: { tensors: names.length, differ: differ.map((n) => ({ tensor: n, a: fa.get(n) ?? null, b: fb.get(n) ?? null })) },
    });
  } else {
    const which = [fa ? null : `${la} (${ma.target})`, fb ? null : `${lb} (${mb.target})`].filter(Boolean).join(' and ');
    sections.push({ id: 'tensor-formats', title: 'Tensor formats', blocks: [{ kind: 'text', text: `Not compared: ${which} records no format per tensor.` }], data: { tensors: null, differ: null } });
  }

  return { schema: 'llmc-report/1', title: `llmc report: ${na} vs ${nb}`, input: { kind: 'artifact', path: `${a.path ?? a.dir} ${b.path ?? b.dir}` }, sections };
}
