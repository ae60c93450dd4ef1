/**
 * The report's sections. General ones appear in every report that has their data; a pass's section
 * is registered here under the record type the pass writes (one file in this folder + one line in
 * RECORD_SECTIONS), and appears when the artifact carries that record or the profile covers that pass.
 */
import { chunkScheduleSection } from './chunk-schedule.js';
import { expertBitsSection } from './expert-bits.js';
import { graphSection } from './graph.js';
import { qualitySection } from './quality.js';
import { outliersSection } from './outliers.js';
import { reorderSection } from './reorder.js';
import { resourcesSection } from './resources.js';
import { sizesSection } from './sizes.js';
import { summarySection } from './summary.js';
import type { GeneralSection, RecordSection } from './types.js';

export type { GeneralSection, RecordSection } from './types.js';

export const GENERAL_SECTIONS: readonly GeneralSection[] = [summarySection, sizesSection, graphSection, qualitySection, resourcesSection];

export const RECORD_SECTIONS: readonly RecordSection[] = [reorderSection, outliersSection, chunkScheduleSection, expertBitsSection];

/** Record id (`<name>/<version>`) → its section. */
export const SECTION_OF_RECORD: ReadonlyMap<string, RecordSection> = new Map(RECORD_SECTIONS.map((s) => [s.record.id, s]));
