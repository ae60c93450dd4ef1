/**
 * The one check of `llmc run`'s model-specific options against what the model offers, before anything
 * loads. Exit-code rule: asking a model for what it does not offer (`--level` on a one-model
 * artifact, `--speculative` without a verification tree, two options that do not combine) is a usage
 * error, exit 2, the same on every target; a file that is missing, damaged or unreadable is an input
 * error, exit 1. Callers describe their model as a RunOffer (a checkpoint, an artifact, a bare GGUF)
 * and call checkRunOptions once; backends may then assume what was asked is there.
 */
import { UsageError } from '../errors.js';
import { CHUNK_SCHEDULE } from '../records/chunk-schedule.js';
import { ELASTIC_LEVELS } from '../records/elastic.js';
import { SPEC_TREE } from '../records/spec-tree.js';
import { findRecord } from '../records/types.js';
import type { Artifact, RunEngine, RunOptions, TargetDescriptor } from './target.js';

/** What a model on `llmc run`'s command line offers the options only some models honour. */
export interface RunOffer {
  /** The model as messages name it: "a Hugging Face checkpoint", "a cuda artifact", "a GGUF file". */
  what: string;
  /** Elastic levels to pick from (--level). */
  levels: boolean;
  /** Chunk graphs and their schedule (--chunk). */
  chunks: boolean;
  /** A verification tree for greedy speculative decoding (--speculative, --draft). */
  speculative: boolean;
  /** Routed experts read from the file on demand (--expert-cache, --expert-policy, --expert-preload). */
  expertCache: boolean;
  /** The engines --engine chooses between (the first is the default); null: one engine, no choice. */
  engines: readonly RunEngine[] | null;
}

/** A Hugging Face checkpoint runs as it is on onnxruntime: none of the artifact options apply. */
export const CHECKPOINT_OFFER: RunOffer = { what: 'a Hugging Face checkpoint', levels: false, chunks: false, speculative: false, expertCache: false, engines: null };

/** What an llmc artifact offers: its target's capabilities and the records its passes wrote. */
export function artifactOffer(a: Artifact, target: TargetDescriptor, where?: string): RunOffer {
  const c = target.capabilities;
  const has = (type: Parameters<typeof findRecord>[1]) => findRecord(a.manifest.passes, type, where) !== null;
  return {
    what: `${/^(hf|[aeiou])/.test(target.name) ? 'an' : 'a'} ${target.name} artifact`,
    levels: c.elasticWidths.kind !== 'none' && has(ELASTIC_LEVELS),
    chunks: c.chunkGraphs && has(CHUNK_SCHEDULE),
    speculative: Boolean(c.speculative) && has(SPEC_TREE),
    expertCache: Boolean(c.expertCache) && a.manifest.arch.moe !== null,
    engines: c.engines ?? null,
  };
}

/** Refuses (UsageError, exit 2) an option the model does not offer, or two that do not combine. */
export function checkRunOptions(offer: RunOffer, o: RunOptions): void {
  const refuse = (flag: string, needs: string) => {
    throw new UsageError(`${flag} needs ${needs}; this is ${offer.what}`);
  };
  if (o.level !== undefined && !offer.levels) refuse('--level', 'an artifact with elastic levels (llmc compile --passes reorder --target ts, cuda or gguf-levels)');
  if (o.chunk !== undefined && !offer.chunks) refuse('--chunk', 'an artifact with chunk graphs (llmc compile --passes chunk-partition --target ts, cuda or qnn)');
  if (o.speculative && !offer.speculative) refuse('--speculative', 'a ts artifact with a verification tree (llmc compile --target ts --passes tree-search)');
  if (o.experts && !offer.expertCache) refuse('--expert-cache', 'a ts artifact of a mixture-of-experts model (llmc compile --target ts)');
  if (o.engine !== undefined && !offer.engines?.includes(o.engine)) {
    throw new UsageError(`--engine ${o.engine}: ${offer.what} runs on ${offer.engines ? offer.engines.join(' or ') : 'one engine, with no choice'}`);
  }
  const together: [boolean, string][] = [
    [o.level !== undefined, '--level'],
    [Boolean(o.speculative), '--speculative'],
    [Boolean(o.experts), '--expert-cache'],
  ];
  if (o.chunk !== undefined) for (const [on, flag] of together) if (on) throw new UsageError(`--chunk and ${flag} do not combine`);
  if (o.speculative && o.level !== undefined) throw new UsageError('--speculative and --level do not combine (the verification tree names its draft)');
  if (o.speculative && o.experts) throw new UsageError('--speculative and --expert-cache do not combine (the verifier runs the model resident)');
}
