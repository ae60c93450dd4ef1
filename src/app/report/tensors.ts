/**
 * Tensor tables for the size breakdown (`llmc report`) and `llmc compile --dry-run`: every weight
 * tensor with its group (the tensor's role in the architecture), its format and its bytes, from an
 * artifact's manifest (ts: its tensor table; gguf: types and dims; hf: the safetensors header) or
 * from a checkpoint's own tensors.
 */
import path from 'node:path';
import { openCheckpoint } from '../../core/checkpoint/index.js';
import { tensorRoles } from '../../core/arch/names.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { DTYPE_BYTES, numel, type DType } from '../../core/checkpoint/safetensors.js';
import type { Manifest } from '../../core/records/manifest.js';
import { QUANT_TYPES, rowBytes, type QuantType } from '../../core/quant/types.js';

export interface TensorRow {
  name: string;
  /** The tensor's role: embedding, attention, mlp, expert, norm, lm_head, router, … (other when unknown). */
  group: string;
  format: string;
  bytes: number;
}

export function groupOf(arch: ArchSpec): (hfName: string) => string {
  const roles = tensorRoles(arch);
  return (name) => roles.get(name) ?? 'other';
}

/** A checkpoint's tensors as they are stored. */
export function sourceTensors(arch: ArchSpec, tensors: readonly { name: string; dtype: string; shape: readonly number[] }[]): TensorRow[] {
  const group = groupOf(arch);
  return tensors.map((t) => ({ name: t.name, group: group(t.name), format: t.dtype, bytes: numel(t.shape) * (DTYPE_BYTES[t.dtype as DType] ?? 4) }));
}

/** An artifact's weight tensors, or null when its target keeps no per-tensor table llmc can read. */
export async function artifactTensors(manifest: Manifest, dir: string): Promise<TensorRow[] | null> {
  const group = groupOf(manifest.arch);
  const info = manifest.targetInfo as Record<string, unknown>;
  if (info.format === 'llmc-ts-weights') {
    return (info.tensors as { name: string; format: string; bytes: number }[]).map((t) => ({ name: t.name, group: group(t.name), format: t.format, bytes: t.bytes }));
  }
  if (info.format === 'gguf') {
    return (info.tensors as { name: string; ne: number[]; type: string; source: string | null }[]).map((t) => ({
      name: t.name,
      group: t.source ? group(t.source) : 'other',
      format: t.type,
      bytes: t.type in QUANT_TYPES ? rowBytes(t.type as QuantType, t.ne[0]) * (numel(t.ne) / t.ne[0]) : 0,
    }));
  }
  if (manifest.target === 'hf') {
    const ckpt = await openCheckpoint(path.resolve(dir));
    try {
      return sourceTensors(manifest.arch, ckpt.tensors);
    } finally {
      await ckpt.close();
    }
  }
  return null;
}

/** Bytes by group and format: rows of [group, format, tensors, bytes], largest groups first. */
export function breakdown(rows: readonly TensorRow[]): { group: string; format: string; tensors: number; bytes: number }[] {
  const m = new Map<string, { group: string; format: string; tensors: number; bytes: number }>();
  for (const r of rows) {
    const k = `${r.group}\u0000${r.format}`;
    const e = m.get(k) ?? { group: r.group, format: r.format, tensors: 0, bytes: 0 };
    e.tensors++;
    e.bytes += r.bytes;
    m.set(k, e);
  }
  const groupTotal = new Map<string, number>();
  for (const e of m.values()) groupTotal.set(e.group, (groupTotal.get(e.group) ?? 0) + e.bytes);
  return [...m.values()].sort((a, b) => groupTotal.get(b.group)! - groupTotal.get(a.group)! || a.group.localeCompare(b.group) || b.bytes - a.bytes || a.format.localeCompare(b.format));
}
