/** `llmc compile --dry-run` output: the files with their sizes, and bytes per tensor group and format. */
import type { DryRun } from '../../compile/compile.js';
import type { ResolvedConfig } from '../../compile/config.js';
import { fmtBytes } from '../../report/doc.js';
import { tensorGroups } from '../../../core/pipeline/summary.js';
import { printJson } from '../output.js';

export function printDryRun(d: DryRun, resolved: ResolvedConfig, json: boolean, notes: string[]): void {
  const groups = tensorGroups(d.arch, d.plan.tensors);
  const total = d.plan.files.reduce((s, f) => s + f.bytes, 0);
  if (json) {
    printJson({ dryRun: true, out: resolved.out, target: d.target, files: d.plan.files, totalBytes: total, groups, tensors: d.plan.tensors, passes: d.passes.map((p) => ({ name: p.name, record: p.metadata.format })), notes: [...d.plan.notes, ...notes] });
    return;
  }
  const w = (s: string) => process.stdout.write(s + '\n');
  w(`dry run: nothing written${resolved.out ? ` (would write ${resolved.out})` : ''}; target ${d.target}${d.passes.length ? `, after ${d.passes.map((p) => p.name).join(', ')}` : ''}`);
  w('files:');
  const pw = Math.max(...d.plan.files.map((f) => f.path.length), 4);
  for (const f of d.plan.files) w(`  ${f.path.padEnd(pw)}  ${String(f.bytes).padStart(12)}  ${fmtBytes(f.bytes)}`);
  w(`  ${'(all)'.padEnd(pw)}  ${String(total).padStart(12)}  ${fmtBytes(total)}  + llmc-manifest.json`);
  w('tensors by group and format:');
  const gw = Math.max(...groups.map((g) => g.group.length), 5);
  const fw = Math.max(...groups.map((g) => g.format.length), 6);
  for (const g of groups) w(`  ${g.group.padEnd(gw)}  ${g.format.padEnd(fw)}  ${String(g.tensors).padStart(4)} tensors  ${String(g.bytes).padStart(12)}  ${fmtBytes(g.bytes)}`);
  for (const n of d.plan.notes) process.stderr.write(`note: ${n}\n`);
}
