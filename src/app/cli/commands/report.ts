import type { Command } from 'commander';
import path from 'node:path';
import { UsageError } from '../../../core/errors.js';
import type { Manifest } from '../../../core/records/manifest.js';
import type { QualityFacts } from '../../report/context.js';
import { evaluable, evaluableTargets } from '../../evaluate/executors.js';
import { noteTo, printJson } from '../output.js';
import { parseIntOption } from '../options.js';
import { DEFAULT_EVAL_TOKENS } from '../../evaluate/defaults.js';

const FORMATS: Record<string, 'html' | 'md' | 'json'> = { '.html': 'html', '.htm': 'html', '.md': 'md', '.json': 'json' };

export function registerReport(program: Command): void {
  program
    .command('report')
    .description('Write a report of an artifact or a profile: one self-contained HTML page (inline SVG and CSS, no scripts), Markdown or JSON')
    .argument('<dir>', 'artifact directory (llmc-manifest.json, from llmc compile), a GGUF file (with or without its llmc manifest), or profile directory (llmc-profile.json, from llmc profile)')
    .argument('[other]', 'a second artifact: compare the two side by side (sizes, quality, formats per tensor)')
    .option('-o, --out <file>', 'output file: .html, .md or .json')
    .option('--json', 'print the report\'s figures as JSON on stdout')
    .option('--source <dir>', "the checkpoint an artifact was compiled from, for the quality table, or a profile's, for its passes' decisions (default: the path the manifest or profile names)")
    .option('--no-quality', 'leave out the quality table (no forward passes)')
    .option('--eval-text <file>', "held-out text for the quality table (default: llmc's built-in held-out text for a model with a tokenizer, else sequences sampled from the source)")
    .option('--eval-tokens <n>', `tokens the quality table scores (default ${DEFAULT_EVAL_TOKENS})`, parseIntOption('--eval-tokens', 1))
    .option('--profile <dir>', 'a profile directory to read measurements from (e.g. importance scores)')
    .option('--cache-dir <dir>', 'the profile cache compile used', '.llmc-cache')
    .addHelpText('after', '\nExamples:\n  llmc report out/model -o report.html\n  llmc report out/profile -o profile.md\n  llmc report out/model --json > report.json\n  llmc report out/q8 out/q4 -o compare.html\n')
    .action(async (dir: string, other: string | undefined, o) => {
      const json = Boolean(o.json);
      let format: 'html' | 'md' | 'json' | undefined;
      if (other !== undefined && o.profile !== undefined) throw new UsageError('--profile is for a report of one artifact or profile, not a comparison');
      if (o.out !== undefined) {
        format = FORMATS[path.extname(o.out).toLowerCase()];
        if (!format) throw new UsageError(`-o ${o.out}: the report is written as .html, .md or .json`);
      } else if (!json) throw new UsageError('give -o FILE (.html, .md or .json) or --json');
      const notes: string[] = [];
      const note = noteTo(notes, json);
      const { openReportInput } = await import('../../report/context.js');
      const { buildReport, reportJson } = await import('../../report/report.js');
      const open = (d: string) =>
        openReportInput(d, {
          cacheDirs: [o.profile, o.cacheDir].filter(Boolean),
          source: o.source,
          note,
          quality: o.quality ? (at, m) => measureQuality(at, m, o, note) : undefined,
        });
      const ctx = await open(dir);
      const report = other === undefined ? await buildReport(ctx, note) : (await import('../../report/compare.js')).compareReport(ctx, await open(other));
      if (format) {
        const { writeFileAtomic, ensureOutputDir } = await import('../../../core/util/atomic.js');
        await ensureOutputDir(path.dirname(path.resolve(o.out)));
        const text =
          format === 'html'
            ? (await import('../../report/html.js')).renderHtml(report)
            : format === 'md'
              ? (await import('../../report/markdown.js')).renderMarkdown(report)
              : JSON.stringify(reportJson(report), null, 2) + '\n';
        await writeFileAtomic(o.out, text);
        if (!json) process.stdout.write(`wrote ${o.out}: ${report.sections.map((s) => s.id).join(', ')}\n`);
      }
      if (json) printJson({ ...(reportJson(report) as object), notes });
    });
}

/** The quality table's figures, or null (with a note) when the artifact or its source cannot be run. */
async function measureQuality(dir: string, manifest: Manifest, o: { source?: string; evalText?: string; evalTokens?: number; cacheDir?: string }, note: (m: string) => void): Promise<QualityFacts | null> {
  if (!evaluable(manifest.target)) {
    note(`quality table left out: llmc does not run ${manifest.target} artifacts (it runs ${evaluableTargets().join(', ')})`);
    return null;
  }
  if (o.source === undefined && manifest.source.sha256 === '') {
    note("quality table left out: a GGUF without llmc's manifest names no source checkpoint; give it with --source DIR");
    return null;
  }
  const sourceDir = o.source ?? manifest.source.path;
  const { openNamedSource } = await import('../../report/context.js');
  const source = await openNamedSource(o.source, manifest.source.path, (why) => note(`quality table left out: the source checkpoint is not readable (${why}); give it with --source DIR`));
  if (!source) return null;
  try {
    if (o.source === undefined && (await source.identity()) !== manifest.source.sha256) {
      note(`quality table left out: ${sourceDir} is no longer the checkpoint the artifact was compiled from (sha256 differs); give it with --source DIR`);
      return null;
    }
    const { evaluateArtifact, heldOutFacts, heldOutSet } = await import('../../evaluate/artifact.js');
    const held = await heldOutSet(source, { text: o.evalText, tokens: o.evalTokens, cacheDir: o.cacheDir });
    const q = await evaluateArtifact({ artifact: { path: dir, dir, manifest }, source, sequences: held.sequences, speedTokens: 64 });
    const { executor, level: _l, sequences: _s, positions, referencePpl, candidatePpl, tokensPerSecond, tokenMs, ...figures } = q;
    return { executor, heldOut: heldOutFacts(held), positions, sourcePpl: referencePpl, artifactPpl: candidatePpl, ...figures, tokensPerSecond: tokensPerSecond ?? null, tokenMs: tokenMs ?? null };
  } finally {
    await source.close();
  }
}
