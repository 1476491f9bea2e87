import { fromNano, type Reservation, toNano } from './budget-types.js';

/**
 * What a request's budget is charged: its cost, at most the hold it was admitted with. The hold is the
 * request's worst case (its prompt estimated high, `max_tokens` times `n`); a provider that reports more
 * (usage past `max_tokens`, images counted above the estimate) would otherwise spend past the budget.
 * `capped` says the provider's count was above it. A request with no budget has no hold and no cap.
 */
export function costWithinHold(cost: number, reservation: Reservation | null): { cost: number; capped: boolean } {
  if (!reservation) return { cost, capped: false };
  return toNano(cost) > reservation.nano ? { cost: fromNano(reservation.nano), capped: true } : { cost, capped: false };
}
