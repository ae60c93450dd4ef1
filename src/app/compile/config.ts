/**
 * llmc.config.json: a compile's pass pipeline with options, the target with its formats and
 * options, and the paths, in a file. It is checked against a schema built from the pass and target
 * registries (zod; one line naming the key, exit 2), command-line flags override it, and the result
 * goes through the pass manager like any command line. `llmc compile --print-config` prints the
 * resolved configuration, itself a valid config file.
 *
 *   {
 *     "model": "fixtures/models/stories260K",
 *     "target": { "name": "ts", "quant": "F16", "tensorTypes": { "mlp\\.down_proj": "F32" }, "options": {} },
 *     "passes": [ { "name": "reorder", "options": { "levels": [0.5, 0.75, 1] } } ],
 *     "out": "out/model", "cacheDir": ".llmc-cache", "check": "budgets.json"
 *   }
 *
 * "target" may be just a name and a pass just its name. Option values are strings, numbers,
 * booleans or lists (written a,b,c). Relative paths are relative to the config file.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { PASSES } from '../../../passes/index.js';
import { TARGETS } from '../../../backends/index.js';
import { LlmcError, summarize, UsageError } from '../../core/errors.js';
import { parseJsonFile } from '../schema.js';
import type { PlanRequest } from './plan.js';

export const CONFIG_FILE = 'llmc.config.json';

const optionValue = z
  .union([z.string(), z.number(), z.boolean(), z.array(z.union([z.string(), z.number()]))], { error: 'must be a string, number, boolean or list' })
  .transform((v) => (Array.isArray(v) ? v.join(',') : String(v)));
const options = z.record(z.string(), optionValue);
const named = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (typeof v === 'string' ? { name: v } : v), schema);

const known = (list: readonly { name: string }[]) => list.map((x) => x.name).sort().join(', ');
const keysOf = (specs: readonly { key: string }[]) => specs.map((s) => s.key).join(', ') || 'none';

const CONFIG = z
  .strictObject({
    $schema: z.string().optional(),
    model: z.string().optional(),
    target: named(
      z.strictObject(
        {
          name: z.string(),
          quant: z.string().optional(),
          tensorTypes: z.record(z.string(), z.string()).optional(),
          options: options.optional(),
        },
        { error: (i) => (i.code === 'invalid_type' ? 'must be a target name or {"name", "quant", "tensorTypes", "options"}' : undefined) },
      ),
    ).optional(),
    passes: z
      .array(named(z.strictObject({ name: z.string(), options: options.optional() }, { error: (i) => (i.code === 'invalid_type' ? 'must be a pass name or {"name", "options"}' : undefined) })))
      .optional(),
    out: z.string().optional(),
    cacheDir: z.string().optional(),
    check: z.string().optional(),
  })
  .superRefine((c, ctx) => {
    // Names and option keys against the registries (values are the pass manager's to check).
    if (c.target) {
      const t = TARGETS.find((x) => x.name === c.target!.name);
      if (!t) ctx.addIssue({ code: 'custom', path: ['target', 'name'], message: `unknown target ${summarize(c.target.name)}; available: ${known(TARGETS)}` });
      for (const k of Object.keys(c.target.options ?? {})) {
        if (t && !t.options.specs.some((s) => s.key === k)) ctx.addIssue({ code: 'custom', path: ['target', 'options', k], message: `not an option of target ${t.name} (it takes ${keysOf(t.options.specs)})` });
      }
    }
    (c.passes ?? []).forEach((p, i) => {
      const d = PASSES.find((x) => x.name === p.name);
      if (!d) return ctx.addIssue({ code: 'custom', path: ['passes', i, 'name'], message: `unknown pass ${summarize(p.name)}; available: ${known(PASSES)}` });
      for (const k of Object.keys(p.options ?? {})) {
        if (!d.options.specs.some((s) => s.key === k)) ctx.addIssue({ code: 'custom', path: ['passes', i, 'options', k], message: `not an option of pass ${d.name} (it takes ${keysOf(d.options.specs)})` });
      }
    });
  });

export type CompileConfig = z.infer<typeof CONFIG>;
const TOP_KEYS = 'model, target, passes, out, cacheDir, check';

/** The configuration, fully spelled out: what --print-config prints (a valid config file itself). */
export interface ResolvedConfig {
  model: string;
  target: { name: string; quant: string | null; tensorTypes: Record<string, string>; options: Record<string, string> };
  passes: { name: string; options: Record<string, string> }[];
  out: string | null;
  cacheDir: string;
  check: string | null;
}

/** Read and check a config file; paths in it become relative to the working directory. */
export async function readConfig(file: string): Promise<CompileConfig> {
  const text = await fsp.readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => {
    throw new LlmcError(`cannot read the config file: ${e.code ?? e.message}`, file, 2);
  });
  const c = parseJsonFile(CONFIG, text, file, (at) => `valid keys there: ${at.length === 0 ? TOP_KEYS : at[0] === 'target' ? 'name, quant, tensorTypes, options' : 'name, options'}`);
  const rel = (p: string | undefined) =>
    p === undefined || path.isAbsolute(p) ? p : path.relative(process.cwd(), path.resolve(path.dirname(file), p)) || '.';
  return { ...c, model: rel(c.model), out: rel(c.out), cacheDir: rel(c.cacheDir), check: rel(c.check) };
}

/** `--config FILE`, else ./llmc.config.json when there is one, else nothing. */
export async function findConfig(explicit: string | undefined): Promise<{ file: string; config: CompileConfig } | null> {
  if (explicit !== undefined) return { file: explicit, config: await readConfig(explicit) };
  const here = path.resolve(CONFIG_FILE);
  const exists = await fsp.stat(here).then(
    (s) => s.isFile(),
    () => false,
  );
  return exists ? { file: CONFIG_FILE, config: await readConfig(here) } : null;
}

/** What the command line says (undefined: not given). */
export interface CompileFlags {
  model?: string;
  target?: string;
  quant?: string;
  /** `REGEX=TYPE`, in order. */
  tensorTypes: string[];
  /** `--passes a,b`. */
  passes?: string[];
  /** `--opt owner.key=value` and the passes' shorthand flags, as owner.key → value. */
  opts: Record<string, string>;
  out?: string;
  cacheDir?: string;
  check?: string;
}

export const DEFAULT_CACHE_DIR = '.llmc-cache';

/**
 * The config with the flags over it. `--passes` replaces the list (a pass still listed keeps its
 * options from the file); `--opt` and flags override single options; `--tensor-type` rules come
 * after the file's (the last match wins); a different `--target` drops the file's target options.
 * Options for owners that are neither a listed pass nor the target stay in `opts` for the pass
 * manager to refuse with its usual message.
 */
export function resolveConfig(config: CompileConfig | null, flags: CompileFlags, configFile?: string): { resolved: ResolvedConfig; request: PlanRequest } {
  const c = config ?? {};
  const targetName = flags.target ?? c.target?.name;
  const model = flags.model ?? c.model;
  const inFile = (key: string) => ` or set "${key}" in ${configFile ?? CONFIG_FILE}`;
  if (!targetName) throw new UsageError(`no target: give --target${inFile('target')}`);
  if (!model) throw new UsageError(`no model: give the checkpoint directory${inFile('model')}`);
  const sameTarget = c.target?.name === targetName;
  const targetOptions: Record<string, string> = { ...(sameTarget ? c.target?.options : {}) };
  const fileOptions = new Map((c.passes ?? []).map((p) => [p.name, { ...p.options }]));
  const passes = (flags.passes ?? (c.passes ?? []).map((p) => p.name)).map((name) => ({ name, options: { ...fileOptions.get(name) } }));
  const leftover: Record<string, string> = {};
  for (const [k, v] of Object.entries(flags.opts)) {
    const dot = k.indexOf('.');
    const owner = dot > 0 ? k.slice(0, dot) : '';
    const pass = passes.find((p) => p.name === owner);
    if (pass) pass.options[k.slice(dot + 1)] = v;
    else if (owner === targetName) targetOptions[k.slice(dot + 1)] = v;
    else leftover[k] = v;
  }
  const tensorTypes: Record<string, string> = { ...(c.target?.tensorTypes ?? {}) };
  const rules: { pattern: RegExp; type: string }[] = [];
  const addRule = (re: string, type: string, where: string) => {
    try {
      rules.push({ pattern: new RegExp(re), type: type.toUpperCase() });
    } catch {
      throw new UsageError(`${where}: "${re}" is not a valid regular expression`);
    }
  };
  for (const [re, type] of Object.entries(tensorTypes)) addRule(re, type, `${configFile ?? CONFIG_FILE}: target.tensorTypes`);
  for (const s of flags.tensorTypes) {
    const i = s.lastIndexOf('=');
    if (i <= 0) throw new UsageError(`--tensor-type takes REGEX=TYPE, got "${s}"`);
    addRule(s.slice(0, i), s.slice(i + 1), '--tensor-type');
    delete tensorTypes[s.slice(0, i)]; // re-added last: it wins
    tensorTypes[s.slice(0, i)] = s.slice(i + 1).toUpperCase();
  }
  const quant = flags.quant ?? c.target?.quant;
  const request: PlanRequest = {
    target: targetName,
    passes,
    opts: { ...Object.fromEntries(Object.entries(targetOptions).map(([k, v]) => [`${targetName}.${k}`, v])), ...leftover },
    quant,
    tensorTypes: rules,
  };
  const resolved: ResolvedConfig = {
    model,
    target: { name: targetName, quant: quant ?? null, tensorTypes, options: targetOptions },
    passes,
    out: flags.out ?? c.out ?? null,
    cacheDir: flags.cacheDir ?? c.cacheDir ?? DEFAULT_CACHE_DIR,
    check: flags.check ?? c.check ?? null,
  };
  return { resolved, request };
}
