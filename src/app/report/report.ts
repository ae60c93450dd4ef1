/**
 * Building a report: the general sections, then one section per pass record (an artifact's, in
 * pass order) or per pass profiled (a profile's), each from the registry in ./sections. A section
 * with nothing to show is left out.
 */
import path from 'node:path';
import { LlmcError } from '../../core/errors.js';
import { findRecord } from '../../core/records/types.js';
import { MANIFEST_FILE } from '../../core/records/manifest.js';
import type { ReportContext } from './context.js';
import type { Report, Section } from './doc.js';
import { GENERAL_SECTIONS, RECORD_SECTIONS, SECTION_OF_RECORD, type RecordSection } from './sections/index.js';

const nameOf = (id: string) => id.slice(0, id.lastIndexOf('/'));

export async function buildReport(ctx: ReportContext, note: (message: string) => void = () => {}): Promise<Report> {
  const sections: Section[] = [];
  const add = (s: Section | null) => {
    if (s && s.blocks.length) sections.push(s);
  };
  for (const g of GENERAL_SECTIONS) add(await g.build(ctx));
  if (ctx.manifest) {
    const where = path.join(ctx.dir, MANIFEST_FILE);
    for (const p of ctx.records) {
      const id = String(p.metadata.format);
      const section: RecordSection | undefined = SECTION_OF_RECORD.get(id) ?? RECORD_SECTIONS.find((s) => nameOf(s.record.id) === nameOf(id));
      if (!section) {
        note(`pass ${p.name} wrote ${id}, which has no report section`);
        continue;
      }
      try {
        add(await section.build(findRecord([p], section.record, where), ctx));
      } catch (e) {
        if (!(e instanceof LlmcError)) throw e;
        note(`${p.name}: section left out: ${e.line}`);
      }
    }
  } else {
    for (const p of ctx.profile?.passes ?? []) {
      const section = SECTION_OF_RECORD.get(p.record);
      if (!section) continue;
      const preview = ctx.records.filter((r) => r.name === p.name);
      add(await section.build(findRecord(preview, section.record, ctx.dir), ctx));
    }
  }
  const what = ctx.kind === 'artifact' ? `${ctx.manifest!.target} artifact` : 'profile';
  return {
    schema: 'llmc-report/1',
    title: `llmc report: ${path.basename(path.resolve(ctx.path ?? ctx.dir))} (${what})`,
    input: { kind: ctx.kind, path: ctx.path ?? ctx.dir },
    sections,
  };
}

/** The report as JSON: every section's figures (charts and tables are views of them). */
export function reportJson(r: Report): unknown {
  return { schema: r.schema, title: r.title, input: r.input, sections: r.sections.map((s) => ({ id: s.id, title: s.title, data: s.data })) };
}
