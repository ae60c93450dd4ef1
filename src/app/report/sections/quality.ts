/** The artifact's quality against its source model on held-out data (src/app/evaluate). */
import { fmtNum } from '../doc.js';
import type { GeneralSection } from './types.js';

export const qualitySection: GeneralSection = {
  id: 'quality',
  async build(ctx) {
    const q = ctx.quality;
    if (!q) return null;
    const held = q.heldOut.source === 'self-generated' ? 'sampled from the source model' : `windows of ${(q.heldOut.source as { text: string }).text}`;
    return {
      id: 'quality',
      title: 'Quality against the source model',
      blocks: [
        {
          kind: 'text',
          text: `Held-out data: ${q.heldOut.sequences} sequences of ${q.heldOut.length} tokens ${held} (seed ${q.heldOut.seed}), ${q.positions} positions, teacher-forced. The source runs on onnxruntime, the artifact on ${q.executor === 'ts-runtime' ? 'the TS runtime' : q.executor}.`,
        },
        {
          kind: 'table',
          columns: ['metric', 'source', 'artifact', 'difference'],
          rows: [
            ['perplexity', fmtNum(q.sourcePpl, 6), fmtNum(q.artifactPpl, 6), fmtNum(q.pplDelta, 4)],
            ['KL(source ‖ artifact), nats/token', '0', fmtNum(q.kl, 4), fmtNum(q.kl, 4)],
            ['greedy agreement', '1', fmtNum(q.greedyAgreement, 4), fmtNum(q.greedyAgreement - 1, 4)],
            ...(q.tokensPerSecond !== null ? [[`decode tokens/s (${q.executor === 'ts-runtime' ? 'TS runtime' : q.executor})`, '—', fmtNum(q.tokensPerSecond, 4), '—'] as (string | number)[]] : []),
          ],
        },
      ],
      data: q,
    };
  },
};
