/** The bytes of one elastic level of a ts artifact: its kept prefix of every tensor in the table, and its adapters. */
import { levelPrefixes } from '../../src/core/pipeline/elastic.js';
import { levelWidths, type Level } from '../../src/core/records/elastic.js';
import type { Manifest } from '../../src/core/records/manifest.js';
import { TS_INFO } from '../../src/exec/runtime/format.js';

export function tsLevelBytes(manifest: Manifest, lv: Level): number {
  const { tensors, adapters = {} } = TS_INFO.read(manifest.targetInfo);
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const adapterNames = new Set(Object.values(adapters).flatMap((a) => a.tensors.flatMap((t) => [t.a, t.b])));
  const kept = levelPrefixes(manifest.arch, levelWidths(lv));
  let bytes = 0;
  for (const t of tensors) {
    if (adapterNames.has(t.name)) continue;
    const k = kept.get(t.name);
    const rows = t.shape[0];
    const cols = t.shape[t.shape.length - 1];
    bytes += (t.bytes * (k?.rows ?? rows) * (t.shape.length > 1 ? (k?.cols ?? cols) : 1)) / (rows * (t.shape.length > 1 ? cols : 1));
  }
  for (const t of adapters[lv.id]?.tensors ?? []) bytes += (byName.get(t.a)?.bytes ?? 0) + (byName.get(t.b)?.bytes ?? 0);
  return Math.round(bytes);
}
