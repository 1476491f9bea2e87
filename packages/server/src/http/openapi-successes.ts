/** A document's operations, as far as describing their successful answers needs. */
interface Document {
  paths?: Record<string, Record<string, { summary?: string; responses?: Record<string, { description?: string }> } | undefined> | undefined>;
}

/** What the generator writes for an answer whose schema gives no description. */
const GENERATED = 'Default Response';

/**
 * Each successful answer (2xx) described by its operation rather than the generator's "Default Response", which a
 * client generated from the document shows as the answer's only documentation. In place; returns the document.
 */
export function describeSuccesses<D>(doc: D): D {
  for (const item of Object.values((doc as Document).paths ?? {})) {
    for (const op of Object.values(item ?? {})) {
      if (!op?.responses) continue;
      for (const [status, answer] of Object.entries(op.responses)) {
        if (!/^2\d\d$/.test(status) || (answer.description !== undefined && answer.description !== GENERATED)) continue;
        const what = op.summary ? op.summary.charAt(0).toLowerCase() + op.summary.slice(1) : 'the operation';
        answer.description = status === '201' ? `Created: ${what}.` : `The answer to: ${what}.`;
      }
    }
  }
  return doc;
}
