/**
 * `llmc list [targets|passes|formats|architectures] [--json]`: what the registries hold, with every option, format and
 * default (the catalogue `llmc compile --help` points to), read from the code so it cannot drift.
 */
import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { TARGETS } from '../../../../backends/index.js';
import { UsageError } from '../../../core/errors.js';
import type { OptionSpec } from '../../../core/pipeline/options.js';
import { lowers, type GraphFeature, type Lowering, type TargetDescriptor } from '../../../core/pipeline/target.js';
import { printJson } from '../output.js';
import { FORMAT_ALIASES } from '../../../core/pipeline/format-names.js';
import { ARCHITECTURES, SUPPORTED_MODEL_TYPES, type ArchEntry } from '../../../core/arch/registry.js';
import { exampleSpec } from '../../../core/arch/example.js';
import type { ArchSpec } from '../../../core/arch/types.js';
import { whatTakes } from '../../../core/pipeline/capabilities.js';

const KINDS = ['targets', 'passes', 'formats', 'architectures'] as const;
type Kind = (typeof KINDS)[number];

const options = (specs: readonly OptionSpec[]) => specs.map((s) => ({ key: s.key, help: s.help, default: s.default ?? null }));

function listing(kind: Kind): unknown {
  switch (kind) {
    case 'targets':
      return TARGETS.map((t) => ({
        name: t.name,
        description: t.description,
        quant: t.formats.quant,
        default: t.formats.default,
        tensorTypes: t.formats.tensorTypes,
        options: options(t.options.specs),
        capabilities: t.capabilities,
        needs: t.requires.map((r) => r.id),
        singleFile: t.singleFile?.extension ?? null,
      }));
    case 'passes':
      return PASSES.map((p) => ({
        name: p.name,
        description: p.description,
        options: options(p.options.specs),
        flags: p.flags.map((f) => ({ flag: f.flag, option: `${p.name}.${f.key}` })),
        after: p.after,
        requires: p.requires,
        writes: p.produces.id,
      }));
    case 'architectures':
      return SUPPORTED_MODEL_TYPES.map(architecture);
    case 'formats':
      return {
        ...Object.fromEntries(TARGETS.map((t) => [t.name, { quant: t.formats.quant, default: t.formats.default, tensorTypes: t.formats.tensorTypes }])),
        aliases: FORMAT_ALIASES,
      };
  }
}

const wrap = (text: string, indent: string, width = 100) => {
  const words = text.split(' ');
  const lines: string[] = [];
  let line = '';
  for (const w of words) {
    if (line && (indent + line + ' ' + w).length > width) {
      lines.push(line);
      line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  if (line) lines.push(line);
  return lines.map((l) => indent + l).join('\n');
};

function optionLines(owner: string, specs: readonly OptionSpec[], indent: string): string[] {
  if (!specs.length) return [`${indent}options: none`];
  return specs.map((s) => wrap(`--opt ${owner}.${s.key}: ${s.help}${s.default !== undefined ? ` (default: ${s.default})` : ''}`, indent));
}

/** What `llmc run` may ask of the target's artifacts (the declared capabilities). */
function runsLine(t: TargetDescriptor): string {
  if (!t.open) return 'llmc run: llmc does not run these artifacts itself';
  const c = t.capabilities;
  const flags = [
    ...(c.elasticWidths.kind !== 'none' ? [`--level (${c.elasticWidths.kind} widths)`] : []),
    ...(lowers(t, 'chunk-graphs') ? ['--chunk'] : []),
    ...(c.speculative ? ['--speculative'] : []),
    ...(c.expertCache ? ['--expert-cache'] : []),
    ...(c.engines ? [`--engine ${c.engines.join('|')}`] : []),
  ];
  return `llmc run: ${flags.length ? flags.join(', ') : 'the full model, none of --level, --chunk, --speculative, --expert-cache'}`;
}

/** The graph features it lowers, approximates (and how) and refuses. */
function lowersLine(t: TargetDescriptor): string {
  const all = Object.entries(t.capabilities.lowers) as [GraphFeature, Lowering][];
  const yes = all.filter(([, l]) => l === true).map(([f]) => f);
  const approx = all.flatMap(([f, l]) => (typeof l === 'object' && 'approximates' in l ? [`${f} (${l.approximates})`] : []));
  const no = all.filter(([, l]) => l === false || (typeof l === 'object' && 'refuses' in l)).map(([f]) => f);
  return [`lowers: ${yes.join(', ') || 'none of the graph features'}`, ...(approx.length ? [`approximates ${approx.join(', ')}`] : []), ...(no.length ? [`refuses ${no.join(', ')}`] : [])].join('; ');
}

/** A family's layer past Llama's, at its config class's defaults. */
function layerOf(e: ArchEntry, s: ArchSpec): string[] {
  return [
    ...(e.moe ? ['routed experts'] : []),
    ...(s.qkNorm ? [s.qkNorm.scope === 'head' ? 'per-head q/k norm' : 'q/k norm over the projection'] : []),
    ...(s.normPlacement !== 'pre' ? [`${s.normPlacement}-norms`] : []),
    ...(s.ropeLayers ? ['rope-less layers'] : []),
    ...(s.multipliers ? ['multipliers'] : []),
    ...(s.hiddenAct === 'gelu_tanh' ? ['GELU-tanh MLP'] : []),
    ...(s.rmsNormOffset ? ['(1 + w) norms'] : []),
    ...(s.finalSoftcap !== null ? ['final logit soft-capping'] : []),
    ...(s.localRope ? ['rope base per layer type'] : []),
  ];
}

/**
 * What each family is and where it goes: the classes it reads, its layer beyond Llama's, and per
 * target and pass whether a compile of the family at its config class's defaults (exampleSpec) is
 * taken — asked of the same checks a compile runs (whatTakes: the targets' lowering and checkArch,
 * the passes' needs and checkArch), with the name a target writes it under, and why where refused.
 * Conditions that depend on a model's sizes (llama.cpp's olmoe without grouped-query attention, ...)
 * are the targets' one-line refusals while writing.
 */
function architecture(t: (typeof SUPPORTED_MODEL_TYPES)[number]) {
  const e: ArchEntry = ARCHITECTURES[t];
  const spec = exampleSpec(t);
  const takes = whatTakes(spec, TARGETS, PASSES);
  const refused = { ...takes.targets, ...takes.passes };
  return {
    modelType: t,
    classes: e.causalLm,
    layer: layerOf(e, spec),
    // Taken: true, or the name the target writes it under; refused: false (null where a name would be).
    targets: Object.fromEntries(TARGETS.map((x) => [x.name, takes.targets[x.name] === null ? (x.writesAs?.(spec) ?? true) : x.writesAs ? null : false])),
    passes: Object.fromEntries(PASSES.map((p) => [p.name, takes.passes[p.name] === null])),
    refused: Object.fromEntries(Object.entries(refused).filter((kv): kv is [string, string] => kv[1] !== null)),
  };
}

export function describeArchitectures(): string {
  const lines = ['Architectures (config.json model_type; targets and passes that take them, "-" where refused):'];
  for (const t of SUPPORTED_MODEL_TYPES) {
    const a = architecture(t);
    lines.push(`  ${t}: ${a.classes.join(' / ')}${a.layer.length ? `; ${a.layer.join(', ')}` : ''}`);
    const targets = Object.entries(a.targets).map(([k, v]) => (v === true ? k : v ? `${k} (${v})` : `-${k}`));
    lines.push(wrap(`targets: ${targets.join(', ')}`, '      '));
    lines.push(wrap(`passes: ${Object.entries(a.passes).map(([k, v]) => (v ? k : `-${k}`)).join(', ')}`, '      '));
  }
  return lines.join('\n');
}

export function describeTargets(): string {
  const lines = ['Targets (--target NAME):'];
  for (const t of TARGETS) {
    lines.push(`  ${t.name}: ${t.description}`);
    const i = '      ';
    lines.push(wrap(`--quant: ${t.formats.quant.join(', ')}; default: ${t.formats.default ?? "each tensor's source dtype"}`, i));
    lines.push(wrap(t.formats.tensorTypes ? `--tensor-type REGEX=TYPE with TYPE one of ${t.formats.tensorTypes.join(', ')}` : '--tensor-type: not taken', i));
    if (t.requires.length) lines.push(`${i}needs: ${t.requires.map((r) => `${r.what} (${PASSES.filter((p) => p.produces.id === r.id).map((p) => `--passes ${p.name}`).join(' or ')})`).join(', ')}`);
    if (t.singleFile) lines.push(`${i}-o NAME${t.singleFile.extension} writes that one file (its manifest beside it)`);
    lines.push(wrap(runsLine(t), i), wrap(lowersLine(t), i));
    lines.push(...optionLines(t.name, t.options.specs, i));
  }
  return lines.join('\n');
}

export function describePasses(): string {
  const lines = ['Passes (--passes A,B; run in an order that satisfies each pass\'s "after"):'];
  for (const p of PASSES) {
    lines.push(`  ${p.name}: ${p.description}`);
    const i = '      ';
    if (p.after.length) lines.push(`${i}runs after: ${p.after.join(', ')}`);
    lines.push(...optionLines(p.name, p.options.specs, i));
    for (const f of p.flags) lines.push(`${i}${f.flag.split(' ')[0]} X is --opt ${p.name}.${f.key}=X`);
  }
  return lines.join('\n');
}

export function describeFormats(): string {
  const lines = ['Formats (--quant; --tensor-type where the target takes it; any case):'];
  for (const t of TARGETS) lines.push(`  ${t.name}: ${t.formats.quant.join(', ')} (default: ${t.formats.default ?? "each tensor's source dtype"})`);
  lines.push(`  the same format by another name, on every target: ${FORMAT_ALIASES.map((g) => g.join(' = ')).join('; ')}`);
  return lines.join('\n');
}

export function registerList(program: Command): void {
  program
    .command('list')
    .description('List the targets, passes, formats or architectures this llmc knows, with their options and defaults')
    .argument('[what]', `${KINDS.join(' | ')} (default: all)`)
    .option('--json', 'machine-readable output')
    .addHelpText('after', '\nExamples:\n  llmc list targets\n  llmc list passes --json\n')
    .action((what: string | undefined, o: { json?: boolean }) => {
      if (what !== undefined && !(KINDS as readonly string[]).includes(what)) throw new UsageError(`list: unknown "${what}"; list ${KINDS.join(', ')}`);
      const kinds = what === undefined ? KINDS : [what as Kind];
      if (o.json) return printJson(what === undefined ? Object.fromEntries(KINDS.map((k) => [k, listing(k)])) : listing(kinds[0]));
      const text = { targets: describeTargets, passes: describePasses, formats: describeFormats, architectures: describeArchitectures };
      process.stdout.write(kinds.map((k) => text[k]()).join('\n\n') + '\n');
    });
}
