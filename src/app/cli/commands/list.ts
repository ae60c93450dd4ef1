/**
 * `llmc list [targets|passes|formats|architectures] [--json]`: what the registries hold, with every option, format and
 * default (the catalogue `llmc compile --help` points to), read from the code so it cannot drift.
 */
import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { TARGETS } from '../../../../backends/index.js';
import { UsageError } from '../../../core/errors.js';
import type { OptionSpec } from '../../../core/pipeline/options.js';
import { printJson } from '../output.js';
import { FORMAT_ALIASES } from '../../../core/pipeline/format-names.js';
import { ARCHITECTURES, SUPPORTED_MODEL_TYPES, type ArchEntry } from '../../../core/arch/registry.js';

/**
 * Each model_type and what the targets make of it, from its registry entry: llama.cpp's architecture,
 * TensorRT-LLM's class, whether transformers.js (the cuda target) has it. Every model_type compiles to
 * ts and hf; a checkpoint's own features may still be refused by a target in one line (naming them).
 */
function architectures() {
  return SUPPORTED_MODEL_TYPES.map((t) => {
    const e: ArchEntry = ARCHITECTURES[t];
    return { modelType: t, classes: e.causalLm, gguf: e.gguf.arch, tensorrtLlm: e.tensorrtLlm?.architecture ?? null, cuda: e.transformersJs !== false, ts: true, hf: true };
  });
}

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
    case 'formats':
      return {
        ...Object.fromEntries(TARGETS.map((t) => [t.name, { quant: t.formats.quant, default: t.formats.default, tensorTypes: t.formats.tensorTypes }])),
        aliases: FORMAT_ALIASES,
      };
    case 'architectures':
      return architectures();
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

export function describeTargets(): string {
  const lines = ['Targets (--target NAME):'];
  for (const t of TARGETS) {
    lines.push(`  ${t.name}: ${t.description}`);
    const i = '      ';
    lines.push(wrap(`--quant: ${t.formats.quant.join(', ')}; default: ${t.formats.default ?? "each tensor's source dtype"}`, i));
    lines.push(wrap(t.formats.tensorTypes ? `--tensor-type REGEX=TYPE with TYPE one of ${t.formats.tensorTypes.join(', ')}` : '--tensor-type: not taken', i));
    if (t.requires.length) lines.push(`${i}needs: ${t.requires.map((r) => `${r.what} (${PASSES.filter((p) => p.produces.id === r.id).map((p) => `--passes ${p.name}`).join(' or ')})`).join(', ')}`);
    if (t.singleFile) lines.push(`${i}-o NAME${t.singleFile.extension} writes that one file (its manifest beside it)`);
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

export function describeArchitectures(): string {
  const rows = architectures().map((a) => [a.modelType, a.gguf, a.tensorrtLlm ?? 'refused', a.cuda ? 'yes' : 'refused', 'yes', 'yes']);
  const head = ['model_type', 'gguf (llama.cpp arch)', 'tensorrt-llm', 'cuda (transformers.js)', 'ts', 'hf'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => '  ' + r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd();
  return [
    'Architectures (config.json model_type) and the targets that write them (a checkpoint feature a target cannot express is refused in one line):',
    line(head),
    ...rows.map(line),
  ].join('\n');
}

export function registerList(program: Command): void {
  program
    .command('list')
    .description('List the targets, passes, formats or architectures this llmc knows, with their options and defaults')
    .argument('[what]', `${KINDS.join(' | ')} (default: all of them)`)
    .option('--json', 'machine-readable output')
    .addHelpText('after', '\nExamples:\n  llmc list targets\n  llmc list passes --json\n')
    .action((what: string | undefined, o: { json?: boolean }) => {
      if (what !== undefined && !(KINDS as readonly string[]).includes(what)) throw new UsageError(`list: unknown "${what}"; list ${KINDS.join(', ')}`);
      const kinds = what === undefined ? KINDS : [what as Kind];
      if (o.json) return printJson(what === undefined ? Object.fromEntries(KINDS.map((k) => [k, listing(k)])) : listing(kinds[0]));
      const text = (k: Kind) => (k === 'targets' ? describeTargets() : k === 'passes' ? describePasses() : k === 'formats' ? describeFormats() : describeArchitectures());
      process.stdout.write(kinds.map(text).join('\n\n') + '\n');
    });
}
