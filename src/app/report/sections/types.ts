/** The two kinds of report sections: general ones, and one per record type (a pass's section). */
import type { RecordType } from '../../../core/records/types.js';
import type { ReportContext } from '../context.js';
import type { Section } from '../doc.js';

/** A section every report may have (model summary, sizes, quality): null when it has nothing to show. */
export interface GeneralSection {
  id: string;
  build(ctx: ReportContext): Promise<Section | null>;
}

/**
 * A pass's section, found by the record type the pass writes. `record` is the artifact's record,
 * or null in a profile's report (the pass has not run: only its measurements exist). Returns null
 * when there is nothing to show, and the section is left out.
 */
export interface RecordSection<T = unknown> {
  record: RecordType<T>;
  build(record: T | null, ctx: ReportContext): Promise<Section | null>;
}

/** Declares a record section with its record's type checked against `build`. */
export const recordSection = <T>(s: RecordSection<T>): RecordSection<unknown> => s as RecordSection<unknown>;
