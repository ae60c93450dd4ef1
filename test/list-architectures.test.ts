/**
 * `llmc list architectures` against the compile's own checks: for every family (at its config class's
 * defaults) and target, the list says the target takes it iff planCompile and the driver's checkModel
 * accept a compile of it with passes writing the records the target needs; a pass iff some target
 * accepts a compile with it. And a refused cell's reason is the compile's own message.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TARGETS } from '../backends/index.js';
import { PASSES } from '../passes/index.js';
import { planCompile } from '../src/app/compile/plan.js';
import { exampleSpec } from '../src/core/arch/example.js';
import { SUPPORTED_MODEL_TYPES } from '../src/core/arch/registry.js';
import type { ArchSpec } from '../src/core/arch/types.js';
import { UsageError } from '../src/core/errors.js';
import { checkModel } from '../src/core/pipeline/capabilities.js';
import type { TargetDescriptor } from '../src/core/pipeline/target.js';
import { llmcInProcess } from './cli.js';

type Row = { modelType: string; targets: Record<string, unknown>; passes: Record<string, boolean>; refused: Record<string, string> };

/** Options a pass cannot be planned without. */
const OPTS: Record<string, Record<string, string>> = { 'expert-bits': { 'expert-bits.budgetBpw': '5' }, 'tree-search': { 'tree-search.draftSkip': '1' } };

/** What the compile does before any work: plan the request, then check the model against the target and passes. */
function accepted(spec: ArchSpec, target: string, passes: readonly string[]): boolean {
  try {
    const plan = planCompile({ target, passes, opts: Object.assign({}, ...passes.map((p) => OPTS[p] ?? {})) });
    checkModel(spec, plan.target, plan.passes.map((p) => p.descriptor), TARGETS);
    return true;
  } catch (err) {
    if (err instanceof UsageError) return false;
    throw err;
  }
}

/** Every way of writing the records the target needs: one pass per record, each choice. */
function passSets(t: TargetDescriptor): string[][] {
  let sets: string[][] = [[]];
  for (const r of t.requires) sets = sets.flatMap((s) => PASSES.filter((p) => p.produces.id === r.id).map((p) => [...s, p.name]));
  return sets;
}

const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-list-arch-'));
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

describe('llmc list architectures says what the compile does', async () => {
  const r = await llmcInProcess('list', 'architectures', '--json');
  const rows = new Map((JSON.parse(r.stdout) as Row[]).map((x) => [x.modelType, x]));

  it('lists every family, every target and every pass', () => {
    expect(r.code).toBe(0);
    expect([...rows.keys()]).toEqual(SUPPORTED_MODEL_TYPES);
    for (const row of rows.values()) {
      expect(Object.keys(row.targets)).toEqual(TARGETS.map((t) => t.name));
      expect(Object.keys(row.passes)).toEqual(PASSES.map((p) => p.name));
    }
  });

  it.each(SUPPORTED_MODEL_TYPES)('%s: a target or pass is listed iff a compile of it is accepted', (t) => {
    const spec = exampleSpec(t);
    const row = rows.get(t)!;
    for (const target of TARGETS) {
      const takes = passSets(target).some((s) => accepted(spec, target.name, s));
      expect(Boolean(row.targets[target.name]), `${t} → ${target.name}`).toBe(takes);
      expect(row.refused[target.name] === undefined, `${t} → ${target.name}: a reason where refused`).toBe(takes);
    }
    for (const pass of PASSES) {
      const takes = TARGETS.some((target) => passSets(target).some((s) => accepted(spec, target.name, [...new Set([...s, pass.name])])));
      expect(row.passes[pass.name], `${t} --passes ${pass.name}`).toBe(takes);
    }
  });

  it("a refused cell's reason is the line the compile ends with (expert-bits on a dense llama)", async () => {
    const out = path.join(tmp, 'eb');
    const c = await llmcInProcess('compile', path.resolve(__dirname, '../fixtures/models/stories260K'), '--target', 'ts', '--passes', 'expert-bits', '--opt', 'expert-bits.budgetBpw=4', '-o', out);
    expect(c.code).toBe(2);
    expect(c.stderr).toBe(`llmc: ${rows.get('llama')!.refused['expert-bits']}\n`);
  });
});
