/**
 * Bytes per tensor group and format: what a compile's summary, the manifest's `summary`, a dry run
 * and a report's size section show. A group is the component of the model a tensor belongs to
 * (src/core/arch/names.ts componentOf), found from the Hugging Face tensors it holds.
 */
import { componentOf, tensorRoles } from '../arch/names.js';
import type { ArchSpec } from '../arch/types.js';
import type { ManifestSummary } from '../records/manifest.js';

/** A tensor as a target writes it: its own name, the source tensors it holds (stacked experts: several), format and bytes. */
export interface WrittenTensor {
  name: string;
  sources: string[];
  format: string;
  bytes: number;
  /** The group of a tensor that holds no source tensor but one a pass made (recovery adapters). */
  group?: string;
}

/** Bytes by group and format, largest groups first. */
export function tensorGroups(spec: ArchSpec, tensors: readonly WrittenTensor[]): ManifestSummary['groups'] {
  const roles = tensorRoles(spec);
  const m = new Map<string, ManifestSummary['groups'][number]>();
  for (const t of tensors) {
    const group = t.group ?? componentOf(t.sources.length ? roles.get(t.sources[0]) : undefined);
    const k = `${group}\u0000${t.format}`;
    const e = m.get(k) ?? { group, format: t.format, tensors: 0, bytes: 0 };
    e.tensors++;
    e.bytes += t.bytes;
    m.set(k, e);
  }
  const total = new Map<string, number>();
  for (const e of m.values()) total.set(e.group, (total.get(e.group) ?? 0) + e.bytes);
  return [...m.values()].sort((a, b) => total.get(b.group)! - total.get(a.group)! || a.group.localeCompare(b.group) || b.bytes - a.bytes || a.format.localeCompare(b.format));
}
