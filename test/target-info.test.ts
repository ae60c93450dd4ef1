/**
 * Typed targetInfo and records checked when written: each target declares its targetInfo as a record
 * type (TargetDescriptor.info); the compile driver checks a pass's record against the type it
 * `produces`, and the target's targetInfo against `info`, before the manifest is written — one line
 * naming the pass or target and the field, and nothing left in the output.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TARGETS } from '../backends/index.js';
import { compile } from '../src/app/compile/compile.js';
import { planCompile } from '../src/app/compile/plan.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { LlmcError } from '../src/core/errors.js';
import { NO_OPTIONS, type PassDescriptor, type TargetDescriptor } from '../src/core/pipeline/index.js';
import { ELASTIC_LEVELS } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

describe('targetInfo and records are checked when written', () => {
  let tmp: string;
  beforeAll(async () => {
    tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-target-info-'));
  });
  afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

  /** The compile's error, and whether anything was left at the output. */
  async function failed(plan: ReturnType<typeof planCompile>, name: string): Promise<{ error: LlmcError; left: boolean }> {
    const source = await openCheckpoint(STORIES);
    const outDir = path.join(tmp, name);
    try {
      await compile({ source, target: plan.target.name, outDir, passes: [], progress: silentProgress, note: () => {} }, plan);
    } catch (e) {
      return { error: e as LlmcError, left: existsSync(outDir) };
    } finally {
      await source.close();
    }
    throw new Error('compiled');
  }

  it('every target declares its targetInfo type', () => {
    for (const t of TARGETS) expect(t.info.id, t.name).toBe(`targetInfo:${t.name}`);
  });

  it("a pass whose record its own type refuses: one line naming the pass and the field, nothing written", async () => {
    // Claims elastic-prefix/2 but leaves out what that record must hold.
    const broken: PassDescriptor = {
      name: 'broken',
      description: 'writes a record that does not match its type',
      options: NO_OPTIONS,
      flags: [],
      after: [],
      requires: [],
      produces: ELASTIC_LEVELS,
      load: async () => ({ run: async (unit) => ({ unit, record: { format: ELASTIC_LEVELS.id, levels: 'none' } }) }),
    };
    const plan = planCompile({ target: 'ts', passes: [] });
    const { error, left } = await failed({ ...plan, passes: [{ descriptor: broken, options: {}, raw: {} }] }, 'record');
    expect(error).toBeInstanceOf(LlmcError);
    expect(error.line).toMatch(/^internal: pass broken wrote a record its type elastic-prefix\/2 refuses: [\w.[\]]+: /);
    expect(error.line.split('\n')).toHaveLength(1);
    expect(left).toBe(false);
  });

  it('a target whose targetInfo its schema refuses: one line naming the target and the key, nothing written', async () => {
    const ts = TARGETS.find((t) => t.name === 'ts')! as TargetDescriptor;
    const liar: TargetDescriptor = {
      ...ts,
      load: async () => {
        const real = await ts.load();
        return { emit: async (unit, ctx) => ({ ...(await real.emit(unit, ctx)), targetInfo: { ...((await real.emit(unit, ctx)).targetInfo as object), weights: '../weights.bin' } }) };
      },
    };
    const plan = planCompile({ target: 'ts', passes: [] });
    const { error, left } = await failed({ ...plan, target: liar }, 'info');
    expect(error.line).toBe('internal: target ts wrote a targetInfo its schema refuses: targetInfo.weights "../weights.bin" is not a file of the artifact');
    expect(left).toBe(false);
  });
});
