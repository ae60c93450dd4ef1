/**
 * `llmc run` on a Hugging Face checkpoint directory (a source, or an `hf` artifact): the model
 * definition lowered to ONNX and run on the onnxruntime Engine.
 */
import { openCheckpoint } from '../../core/checkpoint/index.js';
import type { ArtifactRunner } from '../../core/pipeline/target.js';

export async function openCheckpointRunner(dir: string, opts: { threads?: number; allowNonFinite?: boolean } = {}): Promise<ArtifactRunner> {
  const checkpoint = await openCheckpoint(dir, { allowNonFinite: opts.allowNonFinite });
  try {
    // Loaded on demand: onnxruntime costs ~0.3 s to import, which no other command should pay.
    const { Engine } = await import('./engine.js');
    const engine = await Engine.open(checkpoint, { threads: opts.threads });
    return {
      spec: checkpoint.spec,
      tokenizerJson: checkpoint.assets.tokenizer,
      tokenizerConfigJson: checkpoint.assets.tokenizerConfig,
      generationConfigJson: checkpoint.assets.generationConfig,
      chatTemplate: checkpoint.assets.chatTemplate,
      notes: [],
      engine: 'onnxruntime',
      logits: (ids) => engine.logits(ids),
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
