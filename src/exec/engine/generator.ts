/**
 * What `llmc run` drives: anything that turns prompt ids into generated ids. A Hugging Face
 * checkpoint directory runs on the onnxruntime Engine; an artifact directory (with
 * llmc-manifest.json) is for the TS runtime, which plugs in here.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { openCheckpoint } from '../../core/checkpoint/index.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import type { SamplingOptions } from '../runtime/sampling.js';
import { openArtifactGenerator } from '../runtime/node.js';
import { MANIFEST_FILE } from '../runtime/format.js';

export interface TokenGenerator {
  /** Vocabulary size and stop ids come from here. */
  readonly spec: ArchSpec;
  /** tokenizer.json text when the model ships one. */
  readonly tokenizerJson?: string;
  /** tokenizer_config.json text (BOS handling, special tokens) when present. */
  readonly tokenizerConfigJson?: string;
  /** Generated ids without the prompt; stops after maxTokens or at EOS (the EOS id is included). */
  generate(promptIds: number[], opts: { maxTokens: number } & SamplingOptions): Promise<number[]>;
  close(): Promise<void>;
  /** The generator itself runs the `level` it was opened with (a cuda artifact's level graph). */
  readonly levelApplied?: boolean;
}

const exists = (p: string) =>
  fsp.access(p).then(
    () => true,
    () => false,
  );

export async function openGenerator(modelPath: string, opts: { threads?: number; level?: string } = {}): Promise<TokenGenerator> {
  const manifestFile = path.join(modelPath, MANIFEST_FILE);
  if (await exists(manifestFile)) {
    // An `hf` artifact is a Hugging Face checkpoint: it runs on the engine like any other.
    const target = await fsp
      .readFile(manifestFile, 'utf8')
      .then((t) => (JSON.parse(t) as { target?: string }).target)
      .catch(() => undefined);
    // A `cuda` artifact is an ONNX decoder directory: onnxruntime runs its graph (a level's, with --level).
    if (target === 'cuda') return (await import('./decoder-dir.js')).openCudaArtifact(modelPath, opts);
    if (target !== 'hf') return openArtifactGenerator(modelPath);
  }
  const checkpoint = await openCheckpoint(modelPath);
  try {
    // Loaded on demand: onnxruntime costs ~0.3 s to import, which no other command should pay.
    const { Engine } = await import('./engine.js');
    const engine = await Engine.open(checkpoint, { threads: opts.threads });
    return {
      spec: checkpoint.spec,
      tokenizerJson: checkpoint.assets.tokenizer,
      tokenizerConfigJson: checkpoint.assets.tokenizerConfig,
      generate: (promptIds, o) => engine.generate(promptIds, o),
      close: async () => {
        await engine.close();
        await checkpoint.close();
      },
    };
  } catch (err) {
    await checkpoint.close();
    throw err;
  }
}
