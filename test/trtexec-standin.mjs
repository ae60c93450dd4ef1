#!/usr/bin/env node
/**
 * A stand-in for TensorRT's trtexec that checks its documented argument contract instead of building
 * (no GPU here). The rules are trtexec's own (NVIDIA/TensorRT samples/common/sampleOptions.cpp):
 *  - `--flag` or `--flag=value`, only flags that version knows;
 *  - a shape spec is `name:AxBxC` pairs joined by commas (splitNameAndValue, splitToStringVec(…, 'x'));
 *  - TensorRT 10: several optimization profiles as `--profile=N` each followed by its --minShapes /
 *    --optShapes / --maxShapes (getOptimizationProfiles: the three flags right behind --profile, each
 *    once, indexes unique and contiguous from 0); more than one min/opt/max set without --profile is
 *    an error ("Multiple --minShapes/--optShapes/--maxShapes without --profile are not allowed");
 *  - TensorRT 8: one profile; precision by --fp16 / --int8, workspace by --workspace=N (MiB);
 *  - strongly typed (--stronglyTyped) builds take no precision flags;
 *  - --allowGPUFallback only with --useDLACore; DLA layers need static shapes (min = opt = max).
 * Beyond trtexec: every profile must give every graph input (INPUTS, read from the graph by the
 * test) and min ≤ opt ≤ max, as IOptimizationProfile::setDimensions requires.
 * Env: TRT=8|10 (default 10), INPUTS=comma-separated graph inputs, ARGS_FILE=where to record the parsed build.
 */
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const trt = process.env.TRT === '8' ? 8 : 10;
const argv = process.argv.slice(2);
const fail = (why) => {
  process.stderr.write(`trtexec stand-in (TensorRT ${trt}): ${why}\n`);
  process.exit(1);
};

if (argv[0] === '--help') {
  process.stdout.write(
    trt === 10
      ? '  --minShapes=spec  --optShapes=spec  --maxShapes=spec\n  --memPoolSize=poolspec\n  --stronglyTyped  Create a strongly typed network.\n  --profile  Build with dynamic shapes using a profile with the min/max/opt shapes provided. Can be specified multiple times to create multiple profiles with contiguous index.\n  --useDLACore=N  --allowGPUFallback\n'
      : '  --minShapes=spec  --optShapes=spec  --maxShapes=spec\n  --workspace=N  --fp16  --int8\n  --useDLACore=N  --allowGPUFallback\n',
  );
  process.exit(0);
}

const KNOWN = {
  10: ['onnx', 'minShapes', 'optShapes', 'maxShapes', 'profile', 'memPoolSize', 'stronglyTyped', 'useDLACore', 'allowGPUFallback', 'saveEngine'],
  8: ['onnx', 'minShapes', 'optShapes', 'maxShapes', 'workspace', 'fp16', 'int8', 'useDLACore', 'allowGPUFallback', 'saveEngine'],
}[trt];
const args = argv.map((a) => {
  const m = /^--([A-Za-z][A-Za-z0-9]*)(?:=(.*))?$/s.exec(a);
  if (!m) fail(`"${a}" is not --flag or --flag=value`);
  if (!KNOWN.includes(m[1])) fail(`unknown flag --${m[1]}`);
  return { flag: m[1], value: m[2] };
});
const has = (f) => args.some((a) => a.flag === f);
const value = (f) => args.find((a) => a.flag === f)?.value;

function parseSpec(spec) {
  if (!spec) fail('an empty shape spec');
  const out = new Map();
  for (const pair of spec.split(',')) {
    const at = pair.lastIndexOf(':');
    if (at <= 0) fail(`shape "${pair}" is not name:AxBxC`);
    const name = pair.slice(0, at);
    const dims = pair.slice(at + 1).split('x');
    if (!dims.every((d) => /^\d+$/.test(d))) fail(`shape "${pair}": dimensions must be integers joined by x`);
    if (out.has(name)) fail(`input "${name}" given twice in one shape spec`);
    out.set(name, dims.map(Number));
  }
  return out;
}

// Shape groups: with --profile, the flags right behind each --profile=N; without, one set.
const SHAPES = ['minShapes', 'optShapes', 'maxShapes'];
const profiles = [];
if (has('profile')) {
  if (trt === 8) fail('--profile does not build profiles before TensorRT 10');
  for (let i = 0; i < args.length; i++) {
    if (args[i].flag !== 'profile') {
      if (SHAPES.includes(args[i].flag)) fail(`--${args[i].flag} is not right behind a --profile=N`);
      continue;
    }
    if (!/^\d+$/.test(args[i].value ?? '')) fail(`--profile=${args[i].value}: not a profile index`);
    const index = Number(args[i].value);
    const set = {};
    while (i + 1 < args.length && SHAPES.includes(args[i + 1].flag) && !(args[i + 1].flag in set)) {
      i++;
      set[args[i].flag] = args[i].value;
    }
    if (profiles[index]) fail('Optimization profile index cannot be the same.');
    profiles[index] = set;
  }
  for (let i = 0; i < profiles.length; i++) if (!profiles[i]) fail(`Found invalid or missing shape spec at profile index ${i}.`);
} else {
  for (const f of SHAPES) if (args.filter((a) => a.flag === f).length > 1) fail('Multiple --minShapes/--optShapes/--maxShapes without --profile are not allowed.');
  if (SHAPES.some(has)) profiles.push(Object.fromEntries(SHAPES.filter(has).map((f) => [f, value(f)])));
}

const inputs = (process.env.INPUTS ?? '').split(',').filter(Boolean);
const parsed = profiles.map((p, i) => {
  const given = SHAPES.filter((f) => f in p);
  if (given.length !== 3 && !(given.length === 1 && given[0] === 'optShapes')) fail(`profile ${i}: Must specify only --optShapes or all of --minShapes, --optShapes, --maxShapes`);
  const [min, opt, max] = SHAPES.map((f) => parseSpec(p[f] ?? p.optShapes));
  for (const name of inputs) if (!min.has(name)) fail(`profile ${i} has no shape for graph input "${name}"`);
  for (const name of min.keys()) {
    if (inputs.length && !inputs.includes(name)) fail(`profile ${i} names "${name}", not an input of the graph`);
    if (!opt.has(name) || !max.has(name)) fail(`profile ${i}: "${name}" lacks an opt or max shape`);
    const [a, b, c] = [min.get(name), opt.get(name), max.get(name)];
    if (a.length !== b.length || b.length !== c.length) fail(`profile ${i}: "${name}" has min/opt/max of different ranks`);
    if (a.some((x, k) => x > b[k] || b[k] > c[k])) fail(`profile ${i}: "${name}" needs min ≤ opt ≤ max (${a.join('x')}, ${b.join('x')}, ${c.join('x')})`);
  }
  return Object.fromEntries([...min.keys()].map((n) => [n, { min: min.get(n), opt: opt.get(n), max: max.get(n) }]));
});

if (has('stronglyTyped') && (has('fp16') || has('int8'))) fail('precision flags (--fp16, --int8) are not allowed with a strongly typed network');
if (has('allowGPUFallback') && !has('useDLACore')) fail('--allowGPUFallback without --useDLACore');
if (has('useDLACore')) {
  if (!/^\d+$/.test(value('useDLACore') ?? '')) fail('--useDLACore=N needs a core number');
  for (const [i, p] of parsed.entries()) {
    for (const [name, r] of Object.entries(p)) if (r.min.join() !== r.max.join() || r.opt.join() !== r.max.join()) fail(`DLA needs static shapes: profile ${i} gives "${name}" a range`);
  }
}
if (trt === 10 && has('memPoolSize') && !/^workspace:\d+M$/.test(value('memPoolSize'))) fail(`--memPoolSize=${value('memPoolSize')} is not workspace:<N>M`);
if (trt === 8 && has('workspace') && !/^\d+$/.test(value('workspace'))) fail('--workspace=N takes MiB');
const onnx = value('onnx');
if (!onnx || !existsSync(onnx)) fail(`--onnx=${onnx}: no such model`);
const save = value('saveEngine');
if (!save || !existsSync(path.dirname(save))) fail(`--saveEngine=${save}: its directory does not exist`);

writeFileSync(save, 'plan');
if (process.env.ARGS_FILE) {
  writeFileSync(process.env.ARGS_FILE, JSON.stringify({ argv, profiles: parsed, flags: args.map((a) => a.flag) }, null, 1));
}
