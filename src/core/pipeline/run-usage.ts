/**
 * The one check of `llmc run`'s model-specific options against what the model offers, before anything
 * loads. Exit-code rule: asking a model for what it does not offer (`--level` on a one-model
 * artifact, `--speculative` without a verification tree, two options that do not combine) is a usage
 * error, exit 2, the same on every target; a file that is missing, damaged or unreadable is an input
 * error, exit 1. Callers describe their model as a RunOffer (a checkpoint, an artifact, a bare GGUF)
 * and call checkRunOptions once; backends may then assume what was asked is there. What an artifact offers
 * derives from its target's declared capabilities (TargetCapabilities) and the records it carries; a
 * refusal names the passes and targets that give it, from the registries (RunCatalog).
 */
import { UsageError } from '../errors.js';
import { CHUNK_SCHEDULE } from '../records/chunk-schedule.js';
import { ELASTIC_LEVELS } from '../records/elastic.js';
import { SPEC_TREE } from '../records/spec-tree.js';
import { findRecord, type RecordType } from '../records/types.js';
import type { Artifact, KvType, RunEngine, RunOptions, TargetCapabilities, TargetDescriptor } from './target.js';

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
  /** The KV cache types --kv-type chooses between (the first is the default); null: not selectable. */
  kvTypes: readonly KvType[] | null;
}

/** A Hugging Face checkpoint runs as it is on onnxruntime: none of the artifact options apply. */
export const CHECKPOINT_OFFER: RunOffer = { what: 'a Hugging Face checkpoint', levels: false, chunks: false, speculative: false, expertCache: false, engines: null, kvTypes: null };

/** The registries, for naming in a refusal the passes and targets that give what was asked. */
export interface RunCatalog {
  targets: readonly TargetDescriptor[];
  passes: readonly { name: string; produces: RecordType<unknown> }[];
}

/** One run feature: its flag, what it needs, the record a pass must write and the target's declaration of it. */
interface RunFeature {
  key: 'levels' | 'chunks' | 'speculative' | 'expertCache';
  flag: string;
  asked(o: RunOptions): boolean;
  needs: string;
  /** The record the artifact must carry (a pass writes it), if any. */
  record?: RecordType<unknown>;
  /** Whether the target declares it (TargetCapabilities). */
  declared(c: TargetCapabilities): boolean;
  /** What else the artifact must be (beyond the record). */
  holds?(a: Artifact): boolean;
}

const RUN_FEATURES: readonly RunFeature[] = [
  { key: 'levels', flag: '--level', asked: (o) => o.level !== undefined, needs: 'an artifact with elastic levels', record: ELASTIC_LEVELS, declared: (c) => c.elasticWidths.kind !== 'none' },
  { key: 'chunks', flag: '--chunk', asked: (o) => o.chunk !== undefined, needs: 'an artifact with chunk graphs', record: CHUNK_SCHEDULE, declared: (c) => c.lowers['chunk-graphs'] === true },
  { key: 'speculative', flag: '--speculative', asked: (o) => Boolean(o.speculative), needs: 'an artifact with a verification tree', record: SPEC_TREE, declared: (c) => c.speculative },
  { key: 'expertCache', flag: '--expert-cache', asked: (o) => Boolean(o.experts), needs: 'an artifact of a mixture-of-experts model', declared: (c) => c.expertCache, holds: (a) => a.manifest.arch.moe !== null },
];

/** What an llmc artifact offers: what its target declares, and what the artifact holds (its passes' records, an MoE model). */
export function artifactOffer(a: Artifact, target: TargetDescriptor, where?: string): RunOffer {
  const offers = (f: RunFeature) => f.declared(target.capabilities) && (!f.record || findRecord(a.manifest.passes, f.record, where) !== null) && (f.holds?.(a) ?? true);
  return {
    what: `${/^(hf|[aeiou])/.test(target.name) ? 'an' : 'a'} ${target.name} artifact`,
    ...(Object.fromEntries(RUN_FEATURES.map((f) => [f.key, offers(f)])) as Record<RunFeature['key'], boolean>),
    engines: target.capabilities.engines ?? null,
    kvTypes: target.capabilities.kvTypes ?? null,
  };
}

/** `llmc compile --passes P --target A, B or C`: how to get an artifact with feature `f`, from the registries. */
function howTo(f: RunFeature, catalog: RunCatalog): string {
  const or = (names: string[]) => (names.length > 1 ? `${names.slice(0, -1).join(', ')} or ${names.at(-1)}` : names[0] ?? '(none)');
  const passes = f.record ? catalog.passes.filter((p) => p.produces.id === f.record!.id).map((p) => p.name) : [];
  const targets = catalog.targets.filter((t) => f.declared(t.capabilities)).map((t) => t.name);
  return `llmc compile${passes.length ? ` --passes ${or(passes)}` : ''} --target ${or(targets)}`;
}

/** Refuses (UsageError, exit 2) an option the model does not offer, or two that do not combine. */
export function checkRunOptions(offer: RunOffer, o: RunOptions, catalog: RunCatalog): void {
  for (const f of RUN_FEATURES) {
    if (f.asked(o) && !offer[f.key]) throw new UsageError(`${f.flag} needs ${f.needs} (${howTo(f, catalog)}); this is ${offer.what}`);
  }
  if (o.engine !== undefined && !offer.engines?.includes(o.engine)) {
    throw new UsageError(`--engine ${o.engine}: ${offer.what} runs on ${offer.engines ? offer.engines.join(' or ') : 'one engine, with no choice'}`);
  }
  if (o.kvType !== undefined && !offer.kvTypes?.includes(o.kvType)) {
    const by = catalog.targets.filter((t) => t.capabilities.kvTypes?.includes(o.kvType!)).map((t) => t.name);
    throw new UsageError(`--kv-type ${o.kvType}: ${offer.kvTypes ? `${offer.what} keeps its KV cache in ${offer.kvTypes.join(' or ')}` : `the runner of ${offer.what} has no choice of KV cache type`} (targets that do: ${by.join(', ') || 'none'})`);
  }
  if (o.kvType !== undefined && o.speculative) throw new UsageError('--kv-type and --speculative do not combine (the verifier keeps float32 caches to reproduce greedy decoding)');
  const together: [boolean, string][] = [
    [o.level !== undefined, '--level'],
    [Boolean(o.speculative), '--speculative'],
    [Boolean(o.experts), '--expert-cache'],
  ];
  if (o.chunk !== undefined) for (const [on, flag] of together) if (on) throw new UsageError(`--chunk and ${flag} do not combine`);
  if (o.speculative && o.level !== undefined) throw new UsageError('--speculative and --level do not combine (the verification tree names its draft)');
  if (o.speculative && o.experts) throw new UsageError('--speculative and --expert-cache do not combine (the verifier runs the model resident)');
}
