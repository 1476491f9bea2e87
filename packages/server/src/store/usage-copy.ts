import { forEachInTurns } from '../lib/event-loop-turns.js';
import type { UsageRecord } from './types.js';

/** The usage table's columns in the order both insert paths send them. */
export const USAGE_COLUMNS = `request_id, key_id, workspace_id, kind, model, provider, prompt_tokens, completion_tokens,
  total_tokens, units, cost, latency_ms, status, error_code, streamed, created_at`;

/**
 * Rows converted per turn of the event loop when a chunk's statement is
 * built: a chunk of 500 built at once held the loop for 1-3 ms at every
 * flush, which every request arriving meanwhile waited out (docs/decisions.md).
 */
export const ROWS_PER_TURN = 50;

/**
 * One usage row for `COPY ... FROM` in CSV (embedded PGlite): the batch
 * goes as one string, which the database parses with COPY's own reader,
 * where sixteen array parameters cost it a third more per row. Text is
 * quoted (a quote inside doubled), NULL is an empty unquoted field, and
 * the columns are those of {@link USAGE_COLUMNS}, in that order.
 */
export function usageCsvLine(r: UsageRecord): string {
  return `${text(r.requestId)},${text(r.keyId)},${nullable(r.workspaceId)},${text(r.kind)},${text(r.model)},${nullable(r.provider)},${r.promptTokens},${r.completionTokens},${r.totalTokens},${r.units},${r.cost},${r.latencyMs},${r.status},${nullable(r.errorCode)},${r.streamed ? 't' : 'f'},${r.createdAt.toISOString()}\n`;
}

function text(value: string): string {
  return value.includes('"') ? `"${value.replaceAll('"', '""')}"` : `"${value}"`;
}

function nullable(value: string | null): string {
  return value === null ? '' : text(value);
}

/** Digits after the point of the money columns, `numeric(24, 12)`. */
const SCALE = 12;
const UNIT = 10n ** BigInt(SCALE);

/**
 * A cost as the money column stores it, in 1e-12 EUR: the decimal text
 * `String(amount)` that the other insert path sends, rounded to 12
 * digits half away from zero as PostgreSQL rounds it on input, so that
 * sums made here equal the sums of the stored values.
 */
export function storedPico(amount: number): bigint {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(amount));
  if (!m) throw new RangeError(`amount must be a finite number, got ${amount}`);
  const [, sign, whole, fraction = '', exp = '0'] = m as unknown as [string, string, string, string | undefined, string | undefined];
  // The digits as one integer, with the point `shift` places from the right.
  const digits = `${whole}${fraction}`;
  const shift = fraction.length - Number(exp);
  let pico: bigint;
  if (shift <= SCALE) {
    pico = BigInt(digits) * 10n ** BigInt(SCALE - shift);
  } else {
    const drop = 10n ** BigInt(shift - SCALE);
    const n = BigInt(digits);
    pico = n / drop + ((n % drop) * 2n >= drop ? 1n : 0n);
  }
  return sign === '-' ? -pico : pico;
}

/** A sum in 1e-12 EUR as `numeric` text. */
export function picoText(pico: bigint): string {
  const negative = pico < 0n;
  const abs = negative ? -pico : pico;
  return `${negative ? '-' : ''}${abs / UNIT}.${(abs % UNIT).toString().padStart(SCALE, '0')}`;
}

/** Costs summed per key and per workspace (only rows that cost something), in 1e-12 EUR. */
class SpendSums {
  private readonly byKey = new Map<string, bigint>();
  private readonly byWorkspace = new Map<string, bigint>();

  /** Throws a RangeError for a cost that is not a finite number. */
  add(r: UsageRecord): void {
    const pico = storedPico(r.cost);
    if (pico <= 0n) return;
    this.byKey.set(r.keyId, (this.byKey.get(r.keyId) ?? 0n) + pico);
    if (r.workspaceId !== null) this.byWorkspace.set(r.workspaceId, (this.byWorkspace.get(r.workspaceId) ?? 0n) + pico);
  }

  /** The sums as numeric text, in id order. */
  sorted(): { keys: [string, string][]; workspaces: [string, string][] } {
    return { keys: sorted(this.byKey), workspaces: sorted(this.byWorkspace) };
  }
}

/** The cost of `records` per key and per workspace (only those that cost something), in id order. */
export function spendOf(records: readonly UsageRecord[]): { keys: [string, string][]; workspaces: [string, string][] } {
  const sums = new SpendSums();
  for (const r of records) sums.add(r);
  return sums.sorted();
}

function sorted(sums: Map<string, bigint>): [string, string][] {
  return [...sums.keys()].sort().map((id) => [id, picoText(sums.get(id) as bigint)]);
}

/**
 * One script for a chunk of usage rows: COPY reads them (the CSV goes as
 * PGlite's /dev/blob), and the spend of their keys and workspaces grows by
 * their sums. Sent as one simple query, it is one implicit transaction:
 * all of it is stored, or none (a row already stored fails the COPY).
 * Its only values are ids and decimal sums, written as quoted literals:
 * one call instead of five statements, at about half the fixed cost per
 * chunk (what small chunks, at low traffic, mostly pay). Built
 * {@link ROWS_PER_TURN} rows per turn of the event loop.
 */
export async function usageCopyScript(records: readonly UsageRecord[]): Promise<{ sql: string; csv: string }> {
  // A cost that is not a finite number rejects the whole chunk before anything is sent.
  const sums = new SpendSums();
  let csv = '';
  await forEachInTurns(records, ROWS_PER_TURN, (r) => {
    sums.add(r);
    csv += usageCsvLine(r);
  });
  const spend = sums.sorted();
  let sql = `COPY usage_records (${USAGE_COLUMNS}) FROM '/dev/blob' WITH (FORMAT csv)`;
  for (const [table, rows] of [
    ['api_keys', spend.keys],
    ['workspaces', spend.workspaces],
  ] as const) {
    if (rows.length === 0) continue;
    const values = rows.map(([id, total]) => `(${literal(id)}, ${literal(total)}::numeric)`).join(', ');
    sql += `;\nUPDATE ${table} SET spent = ${table}.spent + s.total FROM (VALUES ${values}) AS s(id, total) WHERE ${table}.id = s.id`;
  }
  return { sql, csv };
}

/** A string literal (standard_conforming_strings, PostgreSQL's default: only the quote is special). */
function literal(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}
