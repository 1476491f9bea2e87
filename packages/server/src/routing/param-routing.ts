import type { Vendor } from '../config/vendor.js';
import { GatewayError } from '../errors/gateway-error.js';
import { type AnswerField, answerFieldsUsed, type DimensionsSupport, describeField, fieldParam, refusedField } from '../providers/param-compat.js';
import { refusedSize } from '../providers/refused-sizes.js';
import type { Offer, RegistryModel } from './registry.js';

/**
 * The model with only the offers whose provider takes every answer-changing field the request uses (`n` > 1,
 * `logit_bias`, …; PROVIDERS.md 2) and the shape of its conversation (Mistral's refusal of a last `system` message): the others are left out before planning, so they are neither attempted nor
 * counted as failures. The model itself, at once, when the request uses none of those fields or every offer takes
 * them. Throws a 400 naming the field when no offer (or none of the pinned provider's) is left. `afterTool`: a user
 * or system message follows a tool result (the chat route tells it), which only prefers the offers that take it.
 */
export function offersTakingFields(
  model: RegistryModel,
  body: Record<string, unknown>,
  adapters: ReadonlyMap<string, { readonly vendor: Vendor }>,
  pin: string | null,
  afterTool = false,
): RegistryModel {
  const used = answerFieldsUsed(body);
  const kept = used === null ? model : keepOffers(model, pin, takesAll(used, adapters), (scope) => noOfferTakes(model, used, scope, adapters, pin));
  return afterTool ? preferTaking(kept, AFTER_TOOL, adapters, pin) : kept;
}

const AFTER_TOOL: readonly AnswerField[] = ['after_tool'];

function takesAll(used: readonly AnswerField[], adapters: ReadonlyMap<string, { readonly vendor: Vendor }>): (o: Offer) => boolean {
  return (o) => {
    const vendor = adapters.get(o.provider)?.vendor;
    return vendor === undefined || refusedField(vendor, used) === null;
  };
}

/**
 * The model with only the offers that take `used` when one in scope does; else the model as it is, so that the
 * provider answers and its refusal is the client's 400 in its own words. For a shape a provider's validator refuses
 * in one version and takes in the next (Mistral's message order), the gateway does not refuse it on the provider's behalf.
 */
function preferTaking(
  model: RegistryModel,
  used: readonly AnswerField[],
  adapters: ReadonlyMap<string, { readonly vendor: Vendor }>,
  pin: string | null,
): RegistryModel {
  const kept = model.offers.filter(takesAll(used, adapters));
  if (kept.length === model.offers.length) return model;
  return kept.some((o) => pin === null || o.provider === pin) ? { ...model, offers: kept } : model;
}

/**
 * The embedding model with only the offers that can answer vectors `dimensions` long: one whose provider refuses the
 * field, or ignores it (its vectors are the model's own size), is left out before planning, as chat's answer fields
 * are. One that ignores it is still tried where no offer in scope is known to honour it (the size asked may be the
 * one it answers). Throws a 400 naming the field when none is left.
 */
export function offersGivingDimensions(
  model: RegistryModel,
  dimensions: number,
  adapters: ReadonlyMap<string, { dimensionsSupport?(upstreamModel: string, dimensions: number): DimensionsSupport }>,
  pin: string | null,
): RegistryModel {
  const support = (o: Offer): DimensionsSupport => {
    const adapter = adapters.get(o.provider);
    if (!adapter) return 'yes';
    return refusedSize(adapter, o.upstreamModel, dimensions) ? 'no' : (adapter.dimensionsSupport?.(o.upstreamModel, dimensions) ?? 'yes');
  };
  const sure = model.offers.some((o) => (pin === null || o.provider === pin) && support(o) === 'yes');
  return keepOffers(
    model,
    pin,
    sure ? (o) => support(o) === 'yes' : (o) => support(o) !== 'no',
    () =>
      new GatewayError(
        'validation',
        `'dimensions' is not supported by ${refusedWhere(model, pin)}: its vectors cannot be shortened there. Leave it out for the model's full-size vectors.`,
        { param: 'dimensions' },
      ),
  );
}

/**
 * The model with only the offers `keep` takes (the model itself when it takes all), left out before planning so that
 * neither a preference nor the failover cut leaves an empty plan. `refused(scope)` is thrown when none is left of
 * the pinned provider's offers or, unpinned, of any; a pin to a provider that does not serve the model is planning's
 * own error.
 */
export function keepOffers(model: RegistryModel, pin: string | null, keep: (o: Offer) => boolean, refused: (scope: Offer[]) => GatewayError): RegistryModel {
  const kept = model.offers.filter(keep);
  if (kept.length === model.offers.length) return model;
  const scope = pin === null ? model.offers : model.offers.filter((o) => o.provider === pin);
  if (scope.length > 0 && !scope.some((o) => kept.includes(o))) throw refused(scope);
  return { ...model, offers: kept };
}

/** How a refusal names where: any provider of the model, or the one the request pins it to. */
export function refusedWhere(model: RegistryModel, pin: string | null): string {
  return pin === null ? `any provider serving '${model.id}'` : `'${pin}', the provider X-Gateway-Provider pins '${model.id}' to`;
}

/** Names the field every provider in scope refuses, or else each one's refusal ("'n' … together with 'logprobs'"). */
function noOfferTakes(
  model: RegistryModel,
  used: readonly AnswerField[],
  scope: Offer[],
  adapters: ReadonlyMap<string, { readonly vendor: Vendor }>,
  pin: string | null,
): GatewayError {
  const vendors = scope.map((o) => adapters.get(o.provider)?.vendor as Vendor);
  const everywhere = used.find((field) => vendors.every((v) => refusedField(v, [field]) !== null));
  const fields = everywhere !== undefined ? [everywhere] : [...new Set(vendors.map((v) => refusedField(v, used) as AnswerField))];
  const what = fields.map(describeField).join(' together with ');
  const sentence = what.charAt(0).toUpperCase() + what.slice(1);
  return new GatewayError('validation', `${sentence} is not supported by ${refusedWhere(model, pin)}.`, { param: fieldParam(fields[0] as AnswerField) });
}
