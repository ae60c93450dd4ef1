/** The artifact's quality against its source model on held-out data (src/app/evaluate), with 95% intervals. */
import { heldOutWords } from '../../evaluate/describe.js';
import type { Interval } from '../../evaluate/quality.js';
import { fmtNum } from '../doc.js';
import type { GeneralSection } from './types.js';

const range = (ci: Interval, digits = 4) => `${fmtNum(ci[0], digits)} – ${fmtNum(ci[1], digits)}`;

export const qualitySection: GeneralSection = {
  id: 'quality',
  async build(ctx) {
    const q = ctx.quality;
    if (!q) return null;
    const c = q.ci95;
    return {
      id: 'quality',
      title: 'Quality against the source model',
      blocks: [
        {
          kind: 'text',
          text: `Held-out data: ${heldOutWords(q.heldOut)}, teacher-forced, every position but a window's last scored. The source runs on onnxruntime, the artifact on ${q.executor === 'ts-runtime' ? 'the TS runtime' : q.executor}. Intervals are 95% (llama-perplexity's ± is one standard error).`,
        },
        {
          kind: 'table',
          columns: ['metric', 'source', 'artifact', 'difference', '95% interval'],
          rows: [
            ['perplexity', fmtNum(q.sourcePpl, 6), fmtNum(q.artifactPpl, 6), fmtNum(q.pplDelta, 4), range(c.pplDelta)],
            ['perplexity ratio', '1', fmtNum(q.pplRatio, 6), '—', range(c.pplRatio, 6)],
            ['KL(source ‖ artifact), nats/token', '0', fmtNum(q.kl, 4), fmtNum(q.kl, 4), range(c.kl)],
            ['KL, 99th percentile', '0', fmtNum(q.klP99, 4), fmtNum(q.klP99, 4), range(c.klP99)],
            ['same top token', '1', fmtNum(q.greedyAgreement, 4), fmtNum(q.greedyAgreement - 1, 4), range(c.greedyAgreement)],
            ...(q.tokensPerSecond !== null ? [[`decode tokens/s (${q.executor === 'ts-runtime' ? 'TS runtime' : q.executor})`, '—', fmtNum(q.tokensPerSecond, 4), '—', '—'] as (string | number)[]] : []),
          ],
        },
      ],
      data: q,
    };
  },
};
