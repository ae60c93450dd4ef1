import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { openCheckpoint } from '../../../core/checkpoint/index.js';
import { UsageError } from '../../../core/errors.js';
import { CACHE_POLICIES, type CachePolicy } from '../../../core/pipeline/pass.js';
import { planPasses } from '../../compile/plan.js';
import { cliProgress, noteTo, printJson } from '../output.js';
import { collectKeyValue } from '../options.js';

export function parseCachePolicy(v: string): CachePolicy {
  if (!(CACHE_POLICIES as readonly string[]).includes(v)) throw new UsageError(`--cache must be one of ${CACHE_POLICIES.join(', ')}, got "${v}"`);
  return v as CachePolicy;
}

export const CACHE_HELP = 'profile cache: on (read and store) | off | redo (recompute, overwrite) | readonly';

export function registerProfile(program: Command): void {
  program
    .command('profile')
    .description('Measure a checkpoint once for the passes (calibration, importance, ...) into a profile directory that compile --profile and report reuse')
    .argument('<model>', 'Hugging Face checkpoint directory')
    .requiredOption('-o, --out <dir>', 'profile directory (created if missing; an interrupted run resumes there)')
    .option('--passes <list>', `passes to profile for, comma-separated (default: every pass that measures something: of ${PASSES.map((p) => p.name).join(', ')}, those with a profile step)`)
    .option('--calib <source>', 'calibration data: self (sampled from the model, seeded; the default), a text FILE (needs the model\'s tokenizer), or a FILE of token ids as JSON [[1, 5, ...], ...]', 'self')
    .option('--opt <key=value>', 'pass option, repeatable (as for compile: the profile is keyed by them)', collectKeyValue('--opt'), {})
    .option('--cache <policy>', CACHE_HELP, parseCachePolicy, 'on')
    .option('--json', 'print the profile index as JSON')
    .addHelpText('after', '\nExamples:\n  llmc profile fixtures/models/stories260K -o out/profile\n  llmc compile fixtures/models/stories260K --target ts --passes reorder --profile out/profile -o out/model\n  llmc report out/profile -o profile.html\n')
    .action(async (model: string, o) => {
      const json = Boolean(o.json);
      const names =
        o.passes === undefined
          ? (await Promise.all(PASSES.map(async (p) => ((await p.load()).profile ? p.name : null)))).filter((n): n is string => n !== null)
          : String(o.passes).split(',').map((s) => s.trim()).filter(Boolean);
      const opts: Record<string, string> = { ...(o.opt as Record<string, string>) };
      if (o.calib !== 'self') {
        // A calibration text goes to every pass that calibrates on one (its `calibText` option).
        const takers = names.filter((n) => PASSES.find((p) => p.name === n)?.options.specs.some((s) => s.key === 'calibText'));
        if (!takers.length) throw new UsageError(`--calib ${o.calib}: none of the passes (${names.join(', ')}) calibrates on text`);
        for (const n of takers) opts[`${n}.calibText`] ??= o.calib;
      }
      const passes = planPasses({ passes: names, opts });
      const notes: string[] = [];
      const note = noteTo(notes, json);
      const source = await openCheckpoint(model);
      try {
        const { runProfile } = await import('../../profile/dir.js');
        let n = 0;
        const index = await runProfile({
          source,
          outDir: o.out,
          passes,
          policy: o.cache,
          progress: cliProgress(json),
          note,
          onStage: (pass, e) => {
            n++;
            if (!json) process.stderr.write(`stage ${n} ${pass}/${e.kind}: ${e.cached ? 'from the profile' : `${(e.ms / 1000).toFixed(1)} s${e.stored ? '' : ', not stored'}`}\n`);
          },
        });
        if (json) printJson({ ...index, notes });
        else process.stdout.write(`${o.cache === 'on' || o.cache === 'redo' ? 'wrote' : 'measured (not stored)'} ${o.out}: ${index.stages.length} stage(s) for ${index.passes.map((p) => p.name).join(', ') || 'no pass'}\n`);
      } finally {
        await source.close();
      }
    });
}
