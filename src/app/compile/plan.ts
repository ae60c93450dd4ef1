/**
 * The pass manager: checks a compile request against the registries before any work and turns it
 * into a plan. Every pass, option, format and the target must fit together: unknown or misplaced
 * options, unknown passes, a pass listed twice, a target without the record it needs and formats the
 * target does not take are usage errors naming the culprit and what is valid. Passes run in an
 * order that honours each one's `after` (otherwise as listed).
 */
import { formatIn as formatNamed } from '../../core/pipeline/format-names.js';
import { PASSES } from '../../../passes/index.js';
import { TARGETS } from '../../../backends/index.js';
import { UsageError } from '../../core/errors.js';
import { checkPassLowered } from '../../core/pipeline/capabilities.js';
import { checkOptionKeys, type OptionSchema } from '../../core/pipeline/options.js';
import type { PassDescriptor } from '../../core/pipeline/pass.js';
import type { FormatRequest, TargetDescriptor } from '../../core/pipeline/target.js';

export interface PlanRequest {
  target: string;
  /** Passes in the order given; each may carry its own options (`key` → value). */
  passes: readonly (string | { name: string; options?: Readonly<Record<string, string>> })[];
  /** `--opt owner.key=value` for passes and the target, not yet routed. */
  opts?: Readonly<Record<string, string>>;
  quant?: string;
  tensorTypes?: readonly { pattern: RegExp; type: string }[];
}

export interface PlannedPass {
  descriptor: PassDescriptor;
  /** Typed by the pass's schema. */
  options: unknown;
  /** The options as given (`key` → value), before parsing. */
  raw: Readonly<Record<string, string>>;
}

export interface CompilePlan {
  target: TargetDescriptor;
  targetOptions: unknown;
  passes: PlannedPass[];
  formats: FormatRequest;
}

const names = (list: readonly { name: string }[]) => list.map((x) => x.name).sort().join(', ') || 'none';

export function findTarget(name: string): TargetDescriptor {
  const t = TARGETS.find((x) => x.name === name);
  if (!t) throw new UsageError(`unknown target "${name}"; available: ${names(TARGETS)}`);
  return t;
}

export function findPass(name: string): PassDescriptor {
  const p = PASSES.find((x) => x.name === name);
  if (!p) throw new UsageError(`unknown pass "${name}"; available: ${names(PASSES)}`);
  return p;
}

/** The spelling of `value` in `table` (any case, aliases such as F16 = fp16), or a usage error listing the table. */
function formatIn(table: readonly string[], value: string, what: string, target: string): string {
  const hit = formatNamed(table, value);
  if (!hit) throw new UsageError(`${what}unknown ${what ? 'tensor' : 'quant'} type "${value}" for target ${target}; valid: ${table.join(', ')}`);
  return hit;
}

/** Stable topological order: each pass after the ones it names in `after`, otherwise as listed. */
function ordered(passes: PassDescriptor[]): PassDescriptor[] {
  const out: PassDescriptor[] = [];
  const pending = [...passes];
  while (pending.length) {
    const i = pending.findIndex((p) => p.after.every((a) => !pending.some((q) => q !== p && q.name === a)));
    if (i < 0) throw new UsageError(`passes ${pending.map((p) => p.name).join(', ')} each wait for another: no order satisfies them`);
    out.push(...pending.splice(i, 1));
  }
  return out;
}

function parseOptions<O>(owner: string, schema: OptionSchema<O>, raw: Readonly<Record<string, string>>): O {
  checkOptionKeys(owner, schema, raw);
  return schema.parse(raw);
}

/** The listed passes' descriptors and raw options; unknown, repeated or missing required passes are refused. */
function listedPasses(passes: PlanRequest['passes']): { descriptors: PassDescriptor[]; raw: Map<string, Record<string, string>> } {
  const listed = passes.map((p) => (typeof p === 'string' ? { name: p, options: {} } : { name: p.name, options: p.options ?? {} }));
  const raw = new Map<string, Record<string, string>>();
  for (const p of listed) {
    findPass(p.name);
    if (raw.has(p.name)) throw new UsageError(`--passes lists ${p.name} twice; a pass runs once`);
    raw.set(p.name, { ...p.options });
  }
  const descriptors = listed.map((p) => findPass(p.name));
  for (const d of descriptors) {
    for (const r of d.requires) if (!raw.has(r)) throw new UsageError(`pass ${d.name} needs pass ${r}: add it to --passes`);
  }
  return { descriptors, raw };
}

/**
 * The passes of a request without a target (`llmc profile`): the same checks as planCompile's,
 * and `--opt` must name a listed pass.
 */
export function planPasses(req: Pick<PlanRequest, 'passes' | 'opts'>): PlannedPass[] {
  const { descriptors, raw } = listedPasses(req.passes);
  for (const [k, v] of Object.entries(req.opts ?? {})) {
    const dot = k.indexOf('.');
    const owner = dot > 0 ? k.slice(0, dot) : '';
    if (raw.has(owner)) raw.get(owner)![k.slice(dot + 1)] = v;
    else if (PASSES.some((p) => p.name === owner)) throw new UsageError(`--opt ${k}: pass ${owner} is not profiled; add it to --passes`);
    else throw new UsageError(`unknown option --opt ${k}; options are <pass>.<key> of the passes profiled (${descriptors.map((d) => d.name).join(', ') || 'none'})`);
  }
  return ordered(descriptors).map((d) => ({ descriptor: d, options: parseOptions(d.name, d.options, raw.get(d.name)!), raw: raw.get(d.name)! }));
}

export function planCompile(req: PlanRequest): CompilePlan {
  const target = findTarget(req.target);
  const { descriptors, raw } = listedPasses(req.passes);
  // A pass whose output the target cannot lower is refused before its options are looked at.
  for (const d of descriptors) checkPassLowered(d, target, TARGETS);

  // Route --opt owner.key=value to the pass or target that owns it.
  const targetRaw: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.opts ?? {})) {
    const dot = k.indexOf('.');
    const owner = dot > 0 ? k.slice(0, dot) : '';
    const key = k.slice(dot + 1);
    if (raw.has(owner)) raw.get(owner)![key] = v;
    else if (owner === target.name) targetRaw[key] = v;
    else if (PASSES.some((p) => p.name === owner)) throw new UsageError(`--opt ${k}: pass ${owner} does not run; add it to --passes`);
    else if (TARGETS.some((t) => t.name === owner)) throw new UsageError(`--opt ${k} is an option of target ${owner}, and this compile's target is ${target.name}`);
    else {
      const valid = [
        ...descriptors.flatMap((d) => d.options.specs.map((s) => `${d.name}.${s.key}`)),
        ...target.options.specs.map((s) => `${target.name}.${s.key}`),
      ];
      throw new UsageError(`unknown option --opt ${k}; options are <pass>.<key> or <target>.<key>${valid.length ? `: ${valid.join(', ')}` : ' (none for these passes and this target)'}`);
    }
  }

  // Formats against the target's table.
  const formats: FormatRequest = {
    quant: req.quant === undefined ? undefined : formatIn(target.formats.quant, req.quant, '', target.name),
    tensorTypes: (req.tensorTypes ?? []).map((t) => {
      const table = target.formats.tensorTypes;
      if (!table) throw new UsageError(`the ${target.name} target does not take --tensor-type`);
      return { pattern: t.pattern, type: formatIn(table, t.type, `--tensor-type ${t.pattern.source}=${t.type}: `, target.name) };
    }),
  };

  for (const rec of target.requires) {
    if (!descriptors.some((d) => d.produces.id === rec.id)) {
      const by = PASSES.filter((p) => p.produces.id === rec.id).map((p) => p.name);
      throw new UsageError(`--target ${target.name} needs ${rec.what}: add --passes ${by.join(' or ') || '(no pass writes it)'}`);
    }
  }

  const passes = ordered(descriptors).map((d) => ({ descriptor: d, options: parseOptions(d.name, d.options, raw.get(d.name)!), raw: raw.get(d.name)! }));
  const targetOptions = parseOptions(target.name, target.options, targetRaw);
  for (const p of passes) p.descriptor.check?.(p.options, target, formats, { passes: passes.map((q) => q.descriptor.name) });
  return { target, targetOptions, passes, formats };
}
