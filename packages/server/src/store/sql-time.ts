import type { SQL } from 'drizzle-orm';
import { orm } from './drizzle-cjs.js';

const { sql } = orm;

/** A duration as the whole, positive milliseconds the statements take. */
export const wholeMs = (ms: number): number => Math.max(1, Math.round(ms));

/** `ms` from now by the database's own clock, so that instances with skewed clocks agree on expiries. */
export const inMs = (ms: number): SQL => sql`now() + ${wholeMs(ms)}::integer * interval '1 millisecond'`;
