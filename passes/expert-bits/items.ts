/**
 * What the search decides over: the experts of every MoE layer (routed ones and qwen2_moe's shared
 * expert), grouped into items by granularity, each with its candidate formats as the target would
 * write them (a row-length fallback applied, e.g. Q4_K on rows of 64 → Q5_0) and their exact bytes.
 * Candidates that write the same bytes for an item are one choice.
 */
import { moeNames } from '../../src/core/arch/names.js';
import { isMoeLayer, type ArchSpec } from '../../src/core/arch/spec.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { LlmcError } from '../../src/core/errors.js';
import { fallbackType, rowBytes, type QuantType } from '../../src/core/quant/types.js';
import type { Granularity } from '../../src/core/records/expert-table.js';

export type Proj = 'gate' | 'up' | 'down';
export const PROJS: readonly Proj[] = ['gate', 'up', 'down'];

export interface ExpertRef {
  layer: number;
  /** MoE-layer index (0..S-1). */
  n: number;
  /** Routed expert, or -1 for the shared expert. */
  expert: number;
  key: string;
  tensors: Record<Proj, string>;
  params: number;
}

export interface Choice {
  format: QuantType;
  /** Per item tensor, what is written. */
  written: QuantType[];
  bytes: number;
  /** Every requested candidate this choice stands for (several when their bytes coincide). */
  aliases: QuantType[];
}

export interface Item {
  key: string;
  layer: number;
  /** The experts the item's tensors belong to, and which projections of them. */
  experts: ExpertRef[];
  projs: Proj[];
  tensors: string[];
  params: number;
  choices: Choice[];
}

export function moeLayers(spec: ArchSpec): number[] {
  return Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => isMoeLayer(spec, l));
}

export function expertsOf(source: ModelSource): ExpertRef[] {
  const spec = source.spec;
  const numel = (name: string) => {
    const m = source.meta(name);
    if (!m) throw new LlmcError(`missing tensor "${name}"`, source.description);
    return m.shape.reduce((a, b) => a * b, 1);
  };
  const out: ExpertRef[] = [];
  moeLayers(spec).forEach((layer, n) => {
    const names = moeNames(spec, layer);
    const add = (expert: number, t: { gate: string; up: string; down: string }) =>
      out.push({ layer, n, expert, key: `${layer}.${expert < 0 ? 'shared' : expert}`, tensors: { ...t }, params: numel(t.gate) + numel(t.up) + numel(t.down) });
    names.experts.forEach((t, e) => add(e, t));
    if (names.shared) add(-1, names.shared);
  });
  return out;
}

/** Items of a granularity (layer-proj keeps the shared expert's projections as items of their own: separate tensors). */
export function groupItems(experts: readonly ExpertRef[], g: Granularity): Omit<Item, 'choices'>[] {
  const item = (key: string, layer: number, ex: ExpertRef[], projs: Proj[]) => ({
    key,
    layer,
    experts: ex,
    projs,
    tensors: ex.flatMap((e) => projs.map((p) => e.tensors[p])),
    params: 0,
  });
  if (g === 'expert') return experts.map((e) => item(e.key, e.layer, [e], [...PROJS]));
  if (g === 'expert-proj') return experts.flatMap((e) => PROJS.map((p) => item(`${e.key}.${p}`, e.layer, [e], [p])));
  const out: Omit<Item, 'choices'>[] = [];
  for (const layer of [...new Set(experts.map((e) => e.layer))]) {
    const routed = experts.filter((e) => e.layer === layer && e.expert >= 0);
    const shared = experts.filter((e) => e.layer === layer && e.expert < 0);
    for (const p of PROJS) out.push(item(`${layer}.*.${p}`, layer, routed, [p]));
    for (const s of shared) for (const p of PROJS) out.push(item(`${s.key}.${p}`, layer, [s], [p]));
  }
  return out;
}

/** Bytes of one tensor in a format (whole rows of blocks). */
export function tensorBytes(source: ModelSource, name: string, format: QuantType): number {
  const shape = source.meta(name)!.shape;
  const cols = shape[shape.length - 1];
  return rowBytes(format, cols) * (shape.reduce((a, b) => a * b, 1) / cols);
}

/** The items with their candidate choices (bytes exact, as the target writes them). */
export function itemsOf(source: ModelSource, g: Granularity, formats: readonly QuantType[]): Item[] {
  return groupItems(expertsOf(source), g).map((it) => {
    const shapes = it.tensors.map((t) => source.meta(t)!.shape);
    const params = shapes.reduce((s, sh) => s + sh.reduce((a, b) => a * b, 1), 0);
    const choices: Choice[] = [];
    for (const f of formats) {
      const written = shapes.map((sh) => fallbackType(f, sh[sh.length - 1]));
      const same = choices.find((c) => c.written.every((w, i) => w === written[i]));
      if (same) {
        same.aliases.push(f);
        continue;
      }
      const bytes = it.tensors.reduce((s, t, i) => s + tensorBytes(source, t, written[i]), 0);
      choices.push({ format: f, written, bytes, aliases: [f] });
    }
    return { ...it, params, choices };
  });
}

/** Per item, the choice index standing for requested format f. */
export const choiceFor = (it: Item, f: QuantType) => it.choices.findIndex((c) => c.aliases.includes(f));
