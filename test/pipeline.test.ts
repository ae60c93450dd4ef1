/**
 * The pipeline contracts: a pass and a target added through the registries alone run end to end
 * (the CLI, the pass manager, the compile unit, records, the manifest); every --opt, pass, format and
 * target combination is checked before any work; permuted and sliced views still stream by byte
 * range; and the layers of src/ only import downwards.
 */
import { existsSync, promises as fsp, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TARGETS } from '../backends/index.js';
import { PASSES } from '../passes/index.js';
import { randomOrders, permuteSource } from '../passes/reorder/permute.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type ModelSource } from '../src/core/checkpoint/index.js';
import { UsageError } from '../src/core/errors.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import { toyPass } from './fixtures/toy-plugin/pass.js';
import { toyTarget } from './fixtures/toy-plugin/target.js';
import { silentProgress } from '../src/core/util/progress.js';
import { llmcFromSource, llmcInProcess } from './cli.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.resolve(ROOT, 'fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-pipeline-'));
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

/**
 * A pass and a target from their own folder (test/fixtures/toy-plugin), each added with one
 * registry line: nothing else in llmc knows them (the layering test checks the folder imports only
 * src/core and itself, and that no file outside it names them).
 */
describe('a pass and a target added through the registries alone', () => {
  beforeAll(() => {
    PASSES.push(toyPass);
    TARGETS.push(toyTarget);
  });
  afterAll(() => {
    PASSES.splice(PASSES.indexOf(toyPass), 1);
    TARGETS.splice(TARGETS.indexOf(toyTarget), 1);
  });

  it('compile runs them end to end: options, flags, ordering, annotations, record, manifest', async () => {
    const out = path.join(tmp, 'toy');
    const r = await llmcFromSource(
      'compile', STORIES, '--target', 'toy-target', '--quant', 'b', '--passes', 'toy,reorder', '--toy-scale', '2.5',
      '--opt', 'toy-target.greeting=hi', '--opt', 'reorder.importance=magnitude', '--opt', 'reorder.evaluate=false', '--levels', '0.5,1',
      '--cache-dir', path.join(tmp, 'cache'), '-o', out,
    );
    expect(r.stderr).toContain('toy: after reorder, target toy-target');
    expect(r.code).toBe(0);
    const body = JSON.parse(readFileSync(path.join(out, 'toy.json'), 'utf8'));
    expect(body.greeting).toBe('hi');
    expect(body.quant).toBe('B'); // the table's spelling
    expect(body.scale).toBe(2.5); // the pass's typed record, read back by the target
    expect(body.marked).toEqual(Array.from({ length: 5 }, (_, l) => `model.layers.${l}.self_attn.q_proj.weight`));
    expect(body.ops).toBeGreaterThan(50); // the unit's IR reached the target
    expect(Object.keys(body.formats)).toHaveLength(5); // stories260K: 5 layers' q_proj
    const manifest = JSON.parse(readFileSync(path.join(out, 'llmc-manifest.json'), 'utf8'));
    expect(manifest.target).toBe('toy-target');
    expect(manifest.passes.map((p: { name: string }) => p.name)).toEqual(['reorder', 'toy']);
    expect(manifest.passes[1].metadata.format).toBe('toy-marks/1');
    expect(manifest.passes[1].options).toEqual({ scale: 2.5 });
    // The commands that read an artifact take it too: nothing in llmc was written for it.
    for (const cmd of [['inspect'], ['verify'], ['report', '--json']]) {
      const c = await llmcFromSource(cmd[0], out, ...cmd.slice(1));
      expect(c.code, `${cmd[0]}: ${c.stderr}`).toBe(0);
    }
  });

  it('--help and llmc list list them, from the registries', async () => {
    const r = await llmcFromSource('compile', '--help');
    expect(r.stdout).toContain('toy-target');
    expect(r.stdout).toContain('--toy-scale');
    const list = await llmcFromSource('list');
    expect(list.stdout).toContain('  toy-target: ');
    expect(list.stdout).toContain('--toy-scale X is --opt toy.scale=X');
  });

  it('a format a pass chose per tensor is written by the ts target', async () => {
    const out = path.join(tmp, 'toy-ts');
    const src = await openCheckpoint(STORIES);
    try {
      // ts does not need the toy record, so the toy pass can feed it.
      await compile({ source: src, target: 'ts', outDir: out, passes: ['toy'], progress: silentProgress, note: () => {} });
    } finally {
      await src.close();
    }
    const m = JSON.parse(readFileSync(path.join(out, 'llmc-manifest.json'), 'utf8'));
    const fmt = new Map<string, string>(m.targetInfo.tensors.map((t: { name: string; format: string }) => [t.name, t.format]));
    expect(fmt.get('model.layers.0.self_attn.q_proj.weight')).toBe('Q8_0');
    expect(fmt.get('model.layers.0.self_attn.k_proj.weight')).toBe('F32');
  });
});

describe('the pass manager checks everything before any work', () => {
  const refuse = async (args: string[], message: RegExp) => {
    const out = path.join(tmp, `refused-${Math.random().toString(36).slice(2)}`);
    const r = await llmcInProcess('compile', STORIES, '-o', out, ...args);
    expect(r.code, r.stderr).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(message);
    expect(existsSync(out)).toBe(false);
  };

  it('an option no pass or target owns, naming it and the valid ones', () =>
    refuse(['--target', 'ts', '--passes', 'reorder', '--opt', 'typo=1'], /unknown option --opt typo.*reorder\.importance/));
  it('a pass option without its pass', () => refuse(['--target', 'ts', '--opt', 'reorder.levels=0.5'], /--opt reorder\.levels: pass reorder does not run/));
  it('an unknown key of a pass that runs', () => refuse(['--target', 'ts', '--passes', 'reorder', '--opt', 'reorder.levles=2'], /unknown option --opt reorder\.levles; reorder takes .*reorder\.levels/));
  it("another target's option", () => refuse(['--target', 'ts', '--opt', 'gguf.x=1'], /option of target gguf.*target is ts/));
  it('a target option it does not have', () => refuse(['--target', 'ts', '--opt', 'ts.x=1'], /unknown option --opt ts\.x; ts takes no options/));
  it('a pass listed twice', () => refuse(['--target', 'ts', '--passes', 'reorder,reorder'], /lists reorder twice/));
  it('an unknown pass', () => refuse(['--target', 'ts', '--passes', 'rorder'], /unknown pass "rorder"; available: chunk-partition, expert-bits, imatrix, outliers, reorder/));
  it('a target without the record it needs', () => refuse(['--target', 'gguf-levels'], /gguf-levels needs elastic levels.*--passes reorder/));
  it('a pass that cannot fit the target', () => refuse(['--target', 'gguf-levels', '--passes', 'reorder', '--opt', 'reorder.anchors=2'], /needs one width for all layers/));
  it('--tensor-type where the target takes none', () => refuse(['--target', 'hf', '--tensor-type', 'q_proj=F16'], /the hf target does not take --tensor-type/));
  it('a --tensor-type format the target does not write', () => refuse(['--target', 'ts', '--tensor-type', 'q_proj=Q5_K'], /unknown tensor type "Q5_K" for target ts; valid: F32/));
  it('a bad option value', () => refuse(['--target', 'ts', '--passes', 'reorder', '--opt', 'reorder.levels=2.5'], /reorder\.levels must be/));
});

describe('views stream by byte range', () => {
  /** Counts whole-tensor reads of the checkpoint under a view. */
  const counting = (base: ModelSource) => {
    let reads = 0;
    const src: ModelSource = { ...base, spec: base.spec, assets: base.assets, tensors: base.tensors, description: base.description, dir: base.dir };
    src.readF32 = async (n) => {
      reads++;
      return base.readF32(n);
    };
    src.meta = (n) => base.meta(n);
    src.layout = (n) => base.layout(n);
    src.identity = () => base.identity();
    return { src, reads: () => reads };
  };

  it('a permuted and a sliced model reach the GGUF writer by byte ranges, with the bytes of whole-tensor reads', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const spec = ck.spec;
      const orders = randomOrders(ck, 7, [0, 2, 4]);
      const c = counting(ck);
      const widths = Array.from({ length: spec.numLayers }, () => ({ kvGroups: 2, qHeadsPerGroup: 2, ffn: 96 }));
      const viewed = sliceSource(permuteSource(c.src, orders), widths, 'half');
      const fast = path.join(tmp, 'view-fast');
      await compile({ source: viewed, target: 'gguf', quant: 'Q8_0', outDir: fast, passes: [], progress: silentProgress, note: () => {} });
      expect(c.reads()).toBe(0);
      // The same model with every layout hidden: whole f32 reads, sliced in memory.
      const hidden: ModelSource = { ...viewed, layout: () => null, meta: (n) => viewed.meta(n), readF32: (n) => viewed.readF32(n), identity: () => viewed.identity() };
      const slow = path.join(tmp, 'view-slow');
      await compile({ source: hidden, target: 'gguf', quant: 'Q8_0', outDir: slow, passes: [], progress: silentProgress, note: () => {} });
      expect(c.reads()).toBeGreaterThan(0);
      expect(readFileSync(path.join(fast, 'model.gguf')).equals(readFileSync(path.join(slow, 'model.gguf')))).toBe(true);
    } finally {
      await ck.close();
    }
  });
});

describe('layers of the code', () => {
  const files = (dir: string): string[] =>
    readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
    );
  const imports = (file: string) =>
    [...readFileSync(path.join(ROOT, file), 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) =>
      path.normalize(path.join(path.dirname(file), m[1])),
    );
  /** Where a file may import from, by the folder it sits in (checked in order, first match). */
  const RULES: [string, string[]][] = [
    ['src/core/', ['src/core/']],
    ['src/exec/runtime/', ['src/core/', 'src/exec/runtime/']],
    ['src/exec/', ['src/core/', 'src/exec/']],
    ['src/measure/', ['src/core/', 'src/exec/', 'src/measure/']],
    ['src/app/', ['src/core/', 'src/exec/', 'src/measure/', 'src/app/', 'passes/index', 'backends/index']],
    // The registries list their plugins.
    ['passes/index', ['src/core/', 'passes/']],
    ['backends/index', ['src/core/', 'backends/']],
  ];
  /** A plugin (passes/<name>/, backends/<name>/) imports the layers docs/architecture.md lets it, and its own folder: never another plugin. */
  const PLUGIN_LAYERS: Record<string, string[]> = { passes: ['src/core/', 'src/exec/', 'src/measure/'], backends: ['src/core/', 'src/exec/'] };
  const allowedFor = (f: string): string[] => {
    const rule = RULES.find(([prefix]) => f.startsWith(prefix));
    if (rule) return rule[1];
    const [kind, name] = f.split(path.sep);
    return [...PLUGIN_LAYERS[kind], path.join(kind, name) + path.sep];
  };

  it('nothing imports upwards: core ← exec ← measure ← passes / targets ← app (profile, compile, cli); a plugin imports no other plugin', () => {
    const bad: string[] = [];
    for (const dir of ['src', 'passes', 'backends']) {
      for (const f of files(dir)) {
        const allowed = allowedFor(f);
        for (const target of imports(f)) if (!allowed.some((a) => target.startsWith(a))) bad.push(`${f} → ${target}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('the toy plugin (test/fixtures/toy-plugin) needs nothing but src/core and its own folder, and nothing in llmc names it', () => {
    const toy = path.join('test', 'fixtures', 'toy-plugin');
    const plugin = files(toy);
    expect(plugin.length).toBeGreaterThan(0);
    const bad = plugin.flatMap((f) => imports(f).filter((t) => !t.startsWith('src/core/') && !t.startsWith(toy + path.sep)).map((t) => `${f} → ${t}`));
    expect(bad).toEqual([]);
    const named = ['src', 'passes', 'backends'].flatMap(files).filter((f) => /toy-plugin|toy-marks|toy-target|toyPass|toyTarget/.test(readFileSync(path.join(ROOT, f), 'utf8')));
    expect(named).toEqual([]);
  });

  it('only the architecture registry branches on the model type', () => {
    // (llama.cpp's own architecture names, 'llama' / 'qwen2' / 'qwen2moe', are the gguf target's vocabulary.)
    const hits = ['src', 'passes', 'backends']
      .flatMap(files)
      .filter((f) => !f.startsWith(path.join('src', 'core', 'arch')))
      .filter((f) => {
        const text = readFileSync(path.join(ROOT, f), 'utf8');
        return /modelType\s*[!=]==|switch\s*\([^)]*modelType/.test(text) || /(['"`])(mistral|mixtral|qwen2_moe)\1/.test(text);
      });
    expect(hits).toEqual([]);
  });
});
